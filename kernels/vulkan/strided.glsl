// Strided index arithmetic over the push constants' axis list: axes [first,
// first + count) with sizes dim[] and input strides stride[], the last axis fastest.
#ifndef SGRT_STRIDED_GLSL
#define SGRT_STRIDED_GLSL

// The input offset (in words) of row-major index `idx` over those axes.
uint strided_offset(uint idx, uint first, uint count) {
  uint off = 0u;
  for (uint k = first + count; k-- > first;) {
    off += (idx % pc.dim[k]) * pc.stride[k];
    idx /= pc.dim[k];
  }
  return off;
}

#endif
