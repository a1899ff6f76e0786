/* hash.h — SHA-256 (FIPS 180-4) and a fast non-cryptographic 64-bit hash.
 *
 * SHA-256 names things that must not collide: JIT cache entries are keyed by
 * the SHA-256 of their source, compiler and flags, and each cache entry
 * carries the SHA-256 of its contents so a corrupt file is detected before it
 * is loaded. Incremental use:
 *
 *   kiln_sha256_ctx h;
 *   kiln_sha256_init(&h);
 *   kiln_sha256_update(&h, part1, len1);
 *   kiln_sha256_update(&h, part2, len2);
 *   uint8_t digest[KILN_SHA256_SIZE];
 *   kiln_sha256_final(&h, digest);          // h must be re-initialized to reuse
 *   char hex[KILN_SHA256_HEX_SIZE];
 *   kiln_hex_encode(digest, sizeof digest, hex);
 *
 * or in one call: kiln_sha256_hex(data, len, hex).
 *
 * kiln_hash64 is for hash tables (CSE, memo tables): fast, well mixed, not
 * collision resistant — never use it to name anything persisted.
 *
 * Thread safety: all functions are reentrant; a kiln_sha256 state must not be
 * updated from two threads at once.
 */
#ifndef KILN_BASE_HASH_H
#define KILN_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KILN_SHA256_SIZE 32
#define KILN_SHA256_BLOCK_SIZE 64
#define KILN_SHA256_HEX_SIZE 65 /* 64 hex digits + NUL */

typedef struct kiln_sha256_ctx {
  uint32_t state[8];
  uint64_t total_bytes;                  /* bytes consumed so far */
  uint8_t block[KILN_SHA256_BLOCK_SIZE]; /* pending partial block */
  size_t block_len;
} kiln_sha256_ctx;

void kiln_sha256_init(kiln_sha256_ctx *h);
void kiln_sha256_update(kiln_sha256_ctx *h, const void *data, size_t len);
/* Writes the digest; the state is then spent (init it again to reuse). */
void kiln_sha256_final(kiln_sha256_ctx *h, uint8_t out[KILN_SHA256_SIZE]);

/* One-shot helpers. */
void kiln_sha256(const void *data, size_t len, uint8_t out[KILN_SHA256_SIZE]);
void kiln_sha256_hex(const void *data, size_t len, char out[KILN_SHA256_HEX_SIZE]);

/* Lower-case hex of n bytes into out (2n+1 chars, NUL-terminated). */
void kiln_hex_encode(const uint8_t *bytes, size_t n, char *out);

/* Fast 64-bit hash of bytes, seeded; and a combiner for composite keys. */
uint64_t kiln_hash64(const void *data, size_t len, uint64_t seed);
static inline uint64_t kiln_hash_combine(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

#endif
