# The programs scripts/gpu_check.sh runs, for it and scripts/gpu_bundle.sh (sourced).
cuda_tests=(test_cuda_ops test_cuda_train test_cuda_prepare test_dequant_matmul_gpu test_profile)
vulkan_tests=(test_vulkan_ops test_vulkan_backend test_vulkan_lowp test_vulkan_transformer test_vulkan_gemm)
gpu_benches=(bench_gemm_cuda bench_gemm_graph bench_dequant_matmul bench_train)
