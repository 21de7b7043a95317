/* Native variants of the learner's per-step frame push (benchmarks/
 * frame_push_native.py compiles and times them against NumPy's passes).
 * Not part of the package: a measurement of what native code would save
 * on the inference thread. */
#include <emmintrin.h>
#include <stdint.h>
#include <string.h>

/* Packed stacks (common/env_state.py's layout: one little-endian uint32
 * per pixel, the newest frame in the high byte), in one pass: every word
 * shifted, the new frame's byte written, and the stack copied out.
 * table: [n, hw] words, frames: [n, hw] bytes, out: [n, hw] words. */
void fused_push(uint32_t *restrict table, const uint8_t *restrict frames,
                uint32_t *restrict out, long n, long hw) {
  for (long i = 0; i < n * hw; i++) {
    uint32_t w = (table[i] >> 8) | ((uint32_t)frames[i] << 24);
    table[i] = w;
    out[i] = w;
  }
}

/* A frame ring (each env's last 4 frames as planes [4, hw], slot `newest`
 * the newest): the new frame written once, then the planes interleaved,
 * oldest first, into the agent's [hw, 4] layout with SSE2 byte unpacks.
 * ring: [n, 4, hw], frames: [n, hw], out: [n, hw, 4]. */
void ring_push(uint8_t *restrict ring, const uint8_t *restrict frames,
               uint8_t *restrict out, long n, long hw, int newest) {
  for (long e = 0; e < n; e++) {
    uint8_t *r = ring + e * 4 * hw;
    memcpy(r + (long)newest * hw, frames + e * hw, hw);
    const uint8_t *p0 = r + ((newest + 1) & 3) * hw;
    const uint8_t *p1 = r + ((newest + 2) & 3) * hw;
    const uint8_t *p2 = r + ((newest + 3) & 3) * hw;
    const uint8_t *p3 = r + (long)newest * hw;
    uint8_t *o = out + e * hw * 4;
    long p = 0;
    for (; p + 16 <= hw; p += 16) {
      __m128i a = _mm_loadu_si128((const __m128i *)(p0 + p));
      __m128i b = _mm_loadu_si128((const __m128i *)(p1 + p));
      __m128i c = _mm_loadu_si128((const __m128i *)(p2 + p));
      __m128i d = _mm_loadu_si128((const __m128i *)(p3 + p));
      __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
      __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
      _mm_storeu_si128((__m128i *)(o + 4 * p), _mm_unpacklo_epi16(ab_lo, cd_lo));
      _mm_storeu_si128((__m128i *)(o + 4 * p + 16), _mm_unpackhi_epi16(ab_lo, cd_lo));
      _mm_storeu_si128((__m128i *)(o + 4 * p + 32), _mm_unpacklo_epi16(ab_hi, cd_hi));
      _mm_storeu_si128((__m128i *)(o + 4 * p + 48), _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
    for (; p < hw; p++) {
      o[4 * p] = p0[p];
      o[4 * p + 1] = p1[p];
      o[4 * p + 2] = p2[p];
      o[4 * p + 3] = p3[p];
    }
  }
}
