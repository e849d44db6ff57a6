/* edge: fine-tune a deployable sgrt graph on the box, then run inference.
 *
 *   edge DEPLOY.sg DATA_DIR [STEPS] [SEED] [OUT.sg]
 *
 * DEPLOY.sg comes from `sgrt export MODEL.sg --checkpoint DIR -o DEPLOY.sg`
 * (training programs kept). DATA_DIR holds uncompressed Fashion-MNIST IDX files
 * (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
 * t10k-labels-idx1-ubyte). The program takes the first STEPS batches of the
 * training set in order, runs train_step on each and prints the loss, then
 * runs infer on the first test batch and prints the predicted classes. With
 * OUT.sg it writes the fine-tuned graph, inference only, for the next box.
 *
 * Plain C99, linked only against libsgrt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sgrt/sgrt.h"

#define PIXELS 784
#define CLASSES 10

/* Prints the failed call and sgrt's message, then leaves main's cleanup path. */
#define CHECK(call)                                                    \
  do {                                                                 \
    if ((call) != SGRT_OK) {                                           \
      fprintf(stderr, "edge: %s\n", sgrt_last_error());                \
      goto done;                                                       \
    }                                                                  \
  } while (0)

/* Reads `count` records of `record` bytes from an IDX file of uint8 with
 * `rank` dimensions (big-endian header). Returns malloc'd data or NULL. */
static unsigned char* read_idx(const char* dir, const char* name, int rank, long count, long record) {
  char path[4096];
  unsigned char hdr[16];
  unsigned char* data = NULL;
  long n, per = 1;
  int d;
  FILE* f;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "edge: cannot open %s\n", path);
    return NULL;
  }
  if (fread(hdr, 1, (size_t)(4 + 4 * rank), f) != (size_t)(4 + 4 * rank) || hdr[2] != 0x08 || hdr[3] != rank) {
    fprintf(stderr, "edge: %s is not an IDX file of uint8 with %d dimensions\n", path, rank);
    fclose(f);
    return NULL;
  }
  n = ((long)hdr[4] << 24) | ((long)hdr[5] << 16) | ((long)hdr[6] << 8) | (long)hdr[7];
  for (d = 1; d < rank; ++d) per *= ((long)hdr[4 + 4 * d + 2] << 8) | (long)hdr[4 + 4 * d + 3];
  if (per != record || n < count) {
    fprintf(stderr, "edge: %s holds %ld records of %ld bytes, need %ld of %ld\n", path, n, per, count, record);
    fclose(f);
    return NULL;
  }
  data = malloc((size_t)(count * record));
  if (data && fread(data, 1, (size_t)(count * record), f) != (size_t)(count * record)) {
    fprintf(stderr, "edge: %s is truncated\n", path);
    free(data);
    data = NULL;
  }
  fclose(f);
  return data;
}

/* Example i of the set into row r of the batch: pixels scaled to [0, 1], as sgrt's loader does. */
static void fill(const unsigned char* images, const unsigned char* labels, long i, long r, float* x, int* y) {
  long j;
  for (j = 0; j < PIXELS; ++j) x[r * PIXELS + j] = (float)images[i * PIXELS + j] * (1.f / 255.f);
  y[r] = labels[i];
}

int main(int argc, char** argv) {
  sgrt_session* s = NULL;
  sgrt_tensor_info image, label, logits;
  unsigned char *train_x = NULL, *train_y = NULL, *test_x = NULL, *test_y = NULL;
  float *x = NULL, *out = NULL;
  int *y = NULL, rc = 1;
  long steps = argc > 3 ? atol(argv[3]) : 5, batch, step, r;
  unsigned long seed = argc > 4 ? strtoul(argv[4], NULL, 10) : 1;

  if (argc < 3) {
    fprintf(stderr, "usage: edge DEPLOY.sg DATA_DIR [STEPS] [SEED] [OUT.sg]\n");
    return 2;
  }
  if (sgrt_api_version() != SGRT_API_VERSION) {
    fprintf(stderr, "edge: built against sgrt API %d, linked with %d\n", SGRT_API_VERSION, sgrt_api_version());
    return 1;
  }
  CHECK(sgrt_create(&s));
  CHECK(sgrt_load_file(s, argv[1], "cpu"));
  CHECK(sgrt_tensor(s, "image", &image));
  CHECK(sgrt_tensor(s, "label", &label));
  CHECK(sgrt_tensor(s, "logits", &logits));
  /* What the loops below assume, checked before any buffer is sized by it. */
  if (image.dtype != SGRT_F32 || image.rank != 2 || image.shape[1] != PIXELS) {
    fprintf(stderr, "edge: expected an f32 image input [batch, %d]\n", PIXELS);
    goto done;
  }
  batch = (long)image.shape[0];
  if (label.dtype != SGRT_I32 || label.rank != 1 || label.shape[0] != batch) {
    fprintf(stderr, "edge: expected an i32 label input [%ld]\n", batch);
    goto done;
  }
  if (logits.dtype != SGRT_F32 || logits.rank != 2 || logits.shape[0] != batch || logits.shape[1] != CLASSES) {
    fprintf(stderr, "edge: expected f32 logits [%ld, %d]\n", batch, CLASSES);
    goto done;
  }

  train_x = read_idx(argv[2], "train-images-idx3-ubyte", 3, steps * batch, PIXELS);
  train_y = read_idx(argv[2], "train-labels-idx1-ubyte", 1, steps * batch, 1);
  test_x = read_idx(argv[2], "t10k-images-idx3-ubyte", 3, batch, PIXELS);
  test_y = read_idx(argv[2], "t10k-labels-idx1-ubyte", 1, batch, 1);
  x = malloc((size_t)batch * PIXELS * sizeof *x);
  y = malloc((size_t)batch * sizeof *y);
  out = malloc(logits.bytes);
  if (!train_x || !train_y || !test_x || !test_y || !x || !y || !out) goto done;

  /* Fine-tune: the graph's own optimizer and schedule, over `steps` steps. */
  CHECK(sgrt_reset(s, seed, steps));
  for (step = 0; step < steps; ++step) {
    float loss;
    for (r = 0; r < batch; ++r) fill(train_x, train_y, step * batch + r, r, x, y);
    CHECK(sgrt_set_input(s, "image", SGRT_F32, image.shape, image.rank, x, (size_t)batch * PIXELS * sizeof *x));
    CHECK(sgrt_set_input(s, "label", SGRT_I32, label.shape, label.rank, y, (size_t)batch * sizeof *y));
    CHECK(sgrt_run(s, "train_step"));
    CHECK(sgrt_get_metric(s, "loss", &loss));
    printf("step %ld loss %.9g\n", step + 1, loss);
  }

  /* Inference on the first test batch. */
  {
    long correct = 0;
    for (r = 0; r < batch; ++r) fill(test_x, test_y, r, r, x, y);
    CHECK(sgrt_set_input(s, "image", SGRT_F32, image.shape, image.rank, x, (size_t)batch * PIXELS * sizeof *x));
    CHECK(sgrt_run(s, "infer"));
    CHECK(sgrt_get_output(s, "logits", out, logits.bytes));
    printf("predictions");
    for (r = 0; r < batch; ++r) {
      int c, best = 0;
      for (c = 1; c < CLASSES; ++c)
        if (out[r * CLASSES + c] > out[r * CLASSES + best]) best = c;
      correct += best == y[r];
      printf(" %d", best);
    }
    printf("\naccuracy %ld/%ld\n", correct, batch);
  }
  if (argc > 5) CHECK(sgrt_export(s, argv[5], SGRT_EXPORT_INFER_ONLY, NULL));
  rc = 0;

done:
  sgrt_destroy(s);
  free(train_x);
  free(train_y);
  free(test_x);
  free(test_y);
  free(x);
  free(y);
  free(out);
  return rc;
}
