/* scene_rng.h: the random numbers of the synthetic scene suites (scene.c, scene_long.c):
 * splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014),
 * one 64-bit state, so an item's generator is seeded directly from (seed, index). Header-only and
 * integer-only, so the training scripts can still compile scene.c (and scene_long.c) alone and get
 * identical bytes on every platform; each suite passes its own stream constant. */
#ifndef OC_SCENE_RNG_H
#define OC_SCENE_RNG_H

#include <stdint.h>

typedef struct oc_scene_rng { uint64_t state; } oc_scene_rng;

static inline uint64_t oc_scene_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t oc_scene_next_u64(oc_scene_rng *r) { return oc_scene_mix64(r->state += 0x9E3779B97F4A7C15ull); }
/* 0..n-1 (n >= 1); the modulo bias, n / 2^64, is negligible for the n used here (< 2^13). */
static inline int32_t oc_scene_below(oc_scene_rng *r, int32_t n) { return (int32_t)(oc_scene_next_u64(r) % (uint64_t)n); }

/* Distinct indices of one seed get distinct states (multiplying by an odd constant is a
 * bijection modulo 2^64); stream separates the suites. */
static inline void oc_scene_rng_seed(oc_scene_rng *r, uint64_t stream, uint64_t seed, uint64_t index) {
    r->state = oc_scene_mix64(seed ^ stream) ^ (index * 0xD1B54A32D192ED03ull);
    (void)oc_scene_next_u64(r);
}

#endif
