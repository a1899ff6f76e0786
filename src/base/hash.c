/* SHA-256 written from FIPS 180-4 (sections 4.1.2, 4.2.2, 5.1.1, 5.3.3,
 * 6.2); the constants are the spec's (fractional parts of the cube and
 * square roots of the first primes). */
#include "base/hash.h"

#include <string.h>

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t load_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

#define BIG_S0(x) (rotr32(x, 2) ^ rotr32(x, 13) ^ rotr32(x, 22))
#define BIG_S1(x) (rotr32(x, 6) ^ rotr32(x, 11) ^ rotr32(x, 25))
#define SMALL_S0(x) (rotr32(x, 7) ^ rotr32(x, 18) ^ ((x) >> 3))
#define SMALL_S1(x) (rotr32(x, 17) ^ rotr32(x, 19) ^ ((x) >> 10))
#define CH(x, y, z) (((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))

/* One round with the working variables renamed instead of shifted:
 * d += T1 becomes the new e, h = T1 + T2 becomes the new a. */
#define ROUND(a, b, c, d, e, f, g, h, t)                          \
  do {                                                            \
    uint32_t t1 = h + BIG_S1(e) + CH(e, f, g) + sha256_k[t] + w[t]; \
    uint32_t t2 = BIG_S0(a) + MAJ(a, b, c);                       \
    d += t1;                                                      \
    h = t1 + t2;                                                  \
  } while (0)

/* One 512-bit block (FIPS 180-4 6.2.2). */
static void sha256_block(uint32_t state[8], const uint8_t *block) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; t++) w[t] = SMALL_S1(w[t - 2]) + w[t - 7] + SMALL_S0(w[t - 15]) + w[t - 16];
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; t += 8) {
    ROUND(a, b, c, d, e, f, g, h, t + 0);
    ROUND(h, a, b, c, d, e, f, g, t + 1);
    ROUND(g, h, a, b, c, d, e, f, t + 2);
    ROUND(f, g, h, a, b, c, d, e, t + 3);
    ROUND(e, f, g, h, a, b, c, d, t + 4);
    ROUND(d, e, f, g, h, a, b, c, t + 5);
    ROUND(c, d, e, f, g, h, a, b, t + 6);
    ROUND(b, c, d, e, f, g, h, a, t + 7);
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void kiln_sha256_init(kiln_sha256_ctx *h) {
  static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(h->state, initial, sizeof initial);
  h->total_bytes = 0;
  h->block_len = 0;
}

void kiln_sha256_update(kiln_sha256_ctx *h, const void *data, size_t len) {
  const uint8_t *p = data;
  h->total_bytes += len;
  if (h->block_len) {
    size_t take = KILN_SHA256_BLOCK_SIZE - h->block_len;
    if (take > len) take = len;
    memcpy(h->block + h->block_len, p, take);
    h->block_len += take;
    p += take;
    len -= take;
    if (h->block_len < KILN_SHA256_BLOCK_SIZE) return;
    sha256_block(h->state, h->block);
    h->block_len = 0;
  }
  for (; len >= KILN_SHA256_BLOCK_SIZE; p += KILN_SHA256_BLOCK_SIZE, len -= KILN_SHA256_BLOCK_SIZE)
    sha256_block(h->state, p);
  if (len) {
    memcpy(h->block, p, len);
    h->block_len = len;
  }
}

/* Padding (5.1.1): a 1 bit, zeros up to 56 mod 64 bytes, then the message
 * length in bits as a big-endian 64-bit integer. */
void kiln_sha256_final(kiln_sha256_ctx *h, uint8_t out[KILN_SHA256_SIZE]) {
  uint64_t bits = h->total_bytes * 8;
  h->block[h->block_len++] = 0x80;
  if (h->block_len > 56) {
    memset(h->block + h->block_len, 0, KILN_SHA256_BLOCK_SIZE - h->block_len);
    sha256_block(h->state, h->block);
    h->block_len = 0;
  }
  memset(h->block + h->block_len, 0, 56 - h->block_len);
  for (int i = 0; i < 8; i++) h->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_block(h->state, h->block);
  for (int i = 0; i < 8; i++) store_be32(out + 4 * i, h->state[i]);
  memset(h->block, 0, sizeof h->block);
  h->block_len = 0;
}

void kiln_sha256(const void *data, size_t len, uint8_t out[KILN_SHA256_SIZE]) {
  kiln_sha256_ctx h;
  kiln_sha256_init(&h);
  kiln_sha256_update(&h, data, len);
  kiln_sha256_final(&h, out);
}

void kiln_hex_encode(const uint8_t *bytes, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

void kiln_sha256_hex(const void *data, size_t len, char out[KILN_SHA256_HEX_SIZE]) {
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256(data, len, digest);
  kiln_hex_encode(digest, sizeof digest, out);
}

/* ---- kiln_hash64: 8-byte lanes, multiply-rotate mixing, avalanche finish */

static inline uint64_t rotl64(uint64_t x, int n) { return (x << n) | (x >> (64 - n)); }

static inline uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

uint64_t kiln_hash64(const void *data, size_t len, uint64_t seed) {
  const uint8_t *p = data;
  uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ull);
  for (; len >= 8; p += 8, len -= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w *= 0x87c37b91114253d5ull;
    w = rotl64(w, 31);
    w *= 0x4cf5ad432745937full;
    h ^= w;
    h = rotl64(h, 27) * 5 + 0x52dce729;
  }
  if (len) {
    uint64_t w = 0;
    for (size_t i = 0; i < len; i++) w |= (uint64_t)p[i] << (8 * i);
    w *= 0x87c37b91114253d5ull;
    w = rotl64(w, 31);
    w *= 0x4cf5ad432745937full;
    h ^= w;
  }
  return fmix64(h);
}
