/* tok_bpe.c: byte-pair-encoding merges for one pre-token piece. The merge table maps a pair of
 * token ids to (rank, merged id), so the loop never touches strings. Semantics are Hugging Face's
 * BPE model (tokenizers/src/models/bpe/word.rs, merge_all) and llama.cpp's llm_tokenizer_bpe: repeatedly
 * merge the adjacent pair with the lowest rank, the leftmost one among equal ranks. Implemented with a
 * binary min-heap of (rank << 32 | left position) and lazy deletion: a popped entry is used only if
 * the pair now at that position still has that rank (ranks are unique per pair). */
#include "tokenizer/tok_internal.h"

static inline uint32_t merge_hash(const oc_tokenizer *tok, uint64_t key) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> tok->merge_shift);
}

oc_status oc_bpe_table_alloc(oc_tokenizer *tok, size_t n_merges, oc_error *err) {
    /* load <= 2/3 keeps linear probing short (Qwen2: 151,387 merges in 2^18 slots, 4 MiB) */
    size_t want = n_merges + n_merges / 2;
    uint32_t bits = 4;
    while (bits < 31 && ((size_t)1 << bits) < want) bits++;
    if (((size_t)1 << bits) < want)
        return oc_fail(err, OC_ERR_RANGE, "tokenizer: %zu merges is too many", n_merges);
    size_t n_slots = (size_t)1 << bits;
    tok->merges = oc_mem_alloc(&tok->alloc, n_slots * sizeof *tok->merges);
    if (!tok->merges) return oc_fail(err, OC_ERR_NOMEM, "tokenizer: no memory for the merge table");
    for (size_t i = 0; i < n_slots; i++) tok->merges[i].key = OC_MERGE_EMPTY;
    tok->merge_mask = (uint32_t)(n_slots - 1);
    tok->merge_shift = 64 - bits;
    tok->n_merges = 0;
    return OC_OK;
}

void oc_bpe_table_insert(oc_tokenizer *tok, int32_t left, int32_t right, int32_t merged, uint32_t rank) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint32_t h = merge_hash(tok, key);; h = (h + 1) & tok->merge_mask) {
        oc_merge_slot *s = &tok->merges[h];
        if (s->key == key) return;   /* a duplicate merge: the first (lowest) rank stays */
        if (s->key == OC_MERGE_EMPTY) {
            s->key = key;
            s->rank = rank;
            s->merged = merged;
            tok->n_merges++;
            return;
        }
    }
}

/* Rank of the pair (left, right) and its merged id; 0 when the pair does not merge. */
static inline int merge_find(const oc_tokenizer *tok, int32_t left, int32_t right, uint32_t *rank,
                             int32_t *merged) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint32_t h = merge_hash(tok, key);; h = (h + 1) & tok->merge_mask) {
        const oc_merge_slot *s = &tok->merges[h];
        if (s->key == key) {
            *rank = s->rank;
            *merged = s->merged;
            return 1;
        }
        if (s->key == OC_MERGE_EMPTY) return 0;
    }
}

/* ---- binary min-heap of uint64 ---- */
static void heap_push(uint64_t *heap, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (heap[parent] <= v) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = v;
}

static uint64_t heap_pop(uint64_t *heap, size_t *n) {
    uint64_t top = heap[0], v = heap[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && heap[c + 1] < heap[c]) c++;
        if (heap[c] >= v) break;
        heap[i] = heap[c];
        i = c;
    }
    if (m) heap[i] = v;
    return top;
}

static inline void emit(int32_t id, int32_t *ids, size_t max_ids, size_t *n_ids) {
    if (*n_ids < max_ids) ids[*n_ids] = id;
    (*n_ids)++;
}

void oc_bpe_piece(const oc_tokenizer *tok, oc_tok_scratch *sc, const uint8_t *s, size_t n, int32_t *ids,
                  size_t max_ids, size_t *n_ids) {
    if (n == 1) {
        emit(tok->byte_id[s[0]], ids, max_ids, n_ids);
        return;
    }
    int32_t *id = sc->sym_id, *prev = sc->sym_prev, *next = sc->sym_next;
    uint64_t *heap = sc->heap;
    size_t n_heap = 0;
    uint32_t rank;
    int32_t merged;

    for (size_t i = 0; i < n; i++) {
        id[i] = tok->byte_id[s[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (merge_find(tok, id[i], id[i + 1], &rank, &merged)) heap_push(heap, &n_heap, (uint64_t)rank << 32 | i);

    /* Each merge pushes at most 2 entries and there are at most n - 1 merges, so the heap never holds
     * more than 3n entries (its capacity is OC_TOK_HEAP_PER_BYTE * MAX_PIECE). */
    while (n_heap) {
        uint64_t top = heap_pop(heap, &n_heap);
        int32_t left = (int32_t)(uint32_t)top, right = next[left];
        if (id[left] < 0 || right < 0) continue;   /* left was merged away, or is now the last */
        if (!merge_find(tok, id[left], id[right], &rank, &merged) || rank != (uint32_t)(top >> 32))
            continue;                               /* stale: the pair at left changed */
        id[left] = merged;
        id[right] = -1;
        next[left] = next[right];
        if (next[left] >= 0) prev[next[left]] = left;
        uint32_t r2;
        int32_t m2;
        if (prev[left] >= 0 && merge_find(tok, id[prev[left]], merged, &r2, &m2))
            heap_push(heap, &n_heap, (uint64_t)r2 << 32 | (uint32_t)prev[left]);
        if (next[left] >= 0 && merge_find(tok, merged, id[next[left]], &r2, &m2))
            heap_push(heap, &n_heap, (uint64_t)r2 << 32 | (uint32_t)left);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) emit(id[i], ids, max_ids, n_ids);
}
