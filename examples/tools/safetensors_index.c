/* safetensors_index.c: sharded checkpoints. A model.safetensors.index.json holds
 * {"metadata": {...}, "weight_map": {"tensor name": "model-00001-of-00002.safetensors", ...}};
 * each shard is opened and validated by safetensors.c, the union of their tensors is sorted by
 * name (a name in two shards is an error), and every weight_map entry is checked against the
 * shard it names. A plain .safetensors path gives a set of one file. */
#include "tools/safetensors.h"

#include "tools/json.h"
#include "port.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SHARDS 4096

struct oc_safetensors_set {
    oc_allocator alloc;
    oc_safetensors **files;
    size_t n_files, cap_files;
    const oc_st_tensor **by_name;   /* union of all shards, sorted */
    size_t n_tensors;
};

void oc_safetensors_set_close(oc_safetensors_set *set) {
    if (!set) return;
    oc_allocator a = set->alloc;
    for (size_t i = 0; i < set->n_files; i++) oc_safetensors_close(set->files[i]);
    oc_mem_free(&a, set->files, set->cap_files * sizeof *set->files);
    oc_mem_free(&a, set->by_name, set->n_tensors * sizeof *set->by_name);
    oc_mem_free(&a, set, sizeof *set);
}

static int cmp_tensor_ptr(const void *a, const void *b) {
    const oc_st_tensor *x = *(const oc_st_tensor *const *)a, *y = *(const oc_st_tensor *const *)b;
    size_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = memcmp(x->name.ptr, y->name.ptr, n);
    if (c) return c;
    return (x->name.len > y->name.len) - (x->name.len < y->name.len);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Index every tensor of every shard, sorted, refusing names held twice. */
static oc_status build_union(oc_safetensors_set *set, oc_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < set->n_files; i++) total += oc_safetensors_n_tensors(set->files[i]);
    if (total) {
        set->by_name = oc_mem_alloc(&set->alloc, total * sizeof *set->by_name);
        if (!set->by_name) return oc_fail(err, OC_ERR_NOMEM, "safetensors: cannot allocate the tensor index");
    }
    set->n_tensors = total;
    size_t k = 0;
    for (size_t i = 0; i < set->n_files; i++)
        for (size_t j = 0; j < oc_safetensors_n_tensors(set->files[i]); j++)
            set->by_name[k++] = oc_safetensors_tensor_at(set->files[i], j);
    if (total) qsort(set->by_name, total, sizeof *set->by_name, cmp_tensor_ptr);
    for (size_t i = 1; i < total; i++)
        if (cmp_tensor_ptr(&set->by_name[i - 1], &set->by_name[i]) == 0)
            return oc_fail(err, OC_ERR_FORMAT, "safetensors index: tensor '%.80s' is held by two shards",
                           set->by_name[i]->name.ptr);
    return OC_OK;
}

static oc_status add_file(oc_safetensors_set *set, const char *path, oc_error *err) {
    if (set->n_files == set->cap_files) {
        size_t cap = set->cap_files ? set->cap_files * 2 : 8;
        oc_safetensors **files = oc_mem_alloc(&set->alloc, cap * sizeof *files);
        if (!files) return oc_fail(err, OC_ERR_NOMEM, "safetensors: cannot allocate the shard list");
        if (set->files) memcpy(files, set->files, set->n_files * sizeof *files);
        oc_mem_free(&set->alloc, set->files, set->cap_files * sizeof *set->files);
        set->files = files;
        set->cap_files = cap;
    }
    oc_safetensors *st;
    oc_status s = oc_safetensors_open(&st, path, &set->alloc, err);
    if (s) return s;
    set->files[set->n_files++] = st;
    return OC_OK;
}

/* Open the shards named by an index document. dir is the index's directory ("" or ends with '/'). */
static oc_status open_index(oc_safetensors_set *set, const char *index_path, const char *dir, size_t dir_len,
                            const oc_json *doc, oc_error *err) {
    const uint32_t wm = oc_json_get(doc, oc_json_root(doc), "weight_map");
    if (oc_json_type_of(doc, wm) != OC_JSON_OBJECT)
        return oc_fail(err, OC_ERR_FORMAT, "%.100s: missing \"weight_map\" object", index_path);
    /* distinct shard names, in first-seen order (a linear scan of what was opened) */
    const char **names = NULL;
    size_t n_names = 0, cap_names = oc_json_count(doc, wm);
    if (cap_names) {
        names = oc_mem_alloc(&set->alloc, cap_names * sizeof *names);
        if (!names) return oc_fail(err, OC_ERR_NOMEM, "safetensors index: cannot allocate the shard names");
    }
    oc_status s = OC_OK;
    for (uint32_t k = oc_json_first(doc, wm); k != OC_JSON_NONE && !s; k = oc_json_next(doc, k)) {
        oc_str file, tname;
        oc_error e;
        (void)oc_json_str(doc, k, &tname, &e);
        if (oc_json_str(doc, oc_json_value(doc, k), &file, &e) != OC_OK) {
            s = oc_fail(err, OC_ERR_FORMAT, "%.100s: weight_map entry '%.80s' is not a file name string", index_path, tname.ptr);
            break;
        }
        if (file.len == 0 || strlen(file.ptr) != file.len || strchr(file.ptr, '/') || strchr(file.ptr, '\\') ||
            strcmp(file.ptr, ".") == 0 || strcmp(file.ptr, "..") == 0) {
            s = oc_fail(err, OC_ERR_FORMAT, "%.100s: shard name '%.80s' is not a plain file name", index_path, file.ptr);
            break;
        }
        size_t i = 0;
        while (i < n_names && strcmp(names[i], file.ptr) != 0) i++;
        if (i < n_names) continue;
        if (n_names >= MAX_SHARDS) {
            s = oc_fail(err, OC_ERR_RANGE, "%.100s: more than %d shards", index_path, MAX_SHARDS);
            break;
        }
        names[n_names++] = file.ptr;
        size_t path_bytes = dir_len + file.len + 1;
        char *path = oc_mem_alloc(&set->alloc, path_bytes);
        if (!path) {
            s = oc_fail(err, OC_ERR_NOMEM, "safetensors index: cannot allocate a path");
            break;
        }
        memcpy(path, dir, dir_len);
        memcpy(path + dir_len, file.ptr, file.len + 1);
        s = add_file(set, path, err);
        oc_mem_free(&set->alloc, path, path_bytes);
    }
    if (!s) s = build_union(set, err);
    /* every weight_map entry must be held by the shard it names */
    for (uint32_t k = oc_json_first(doc, wm); k != OC_JSON_NONE && !s; k = oc_json_next(doc, k)) {
        oc_str file, tname;
        oc_error e;
        (void)oc_json_str(doc, k, &tname, &e);
        (void)oc_json_str(doc, oc_json_value(doc, k), &file, &e);
        size_t i = 0;
        while (i < n_names && strcmp(names[i], file.ptr) != 0) i++;
        const oc_st_tensor *t = i < n_names ? oc_safetensors_find(set->files[i], tname.ptr) : NULL;
        if (!t || t->name.len != tname.len)
            s = oc_fail(err, OC_ERR_FORMAT, "%.100s: weight_map puts '%.80s' in %.80s, which does not hold it",
                        index_path, tname.ptr, file.ptr);
    }
    oc_mem_free(&set->alloc, names, cap_names * sizeof *names);
    return s;
}

oc_status oc_safetensors_set_open(oc_safetensors_set **out, const char *path, const oc_allocator *alloc,
                                  oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "safetensors: NULL output");
    *out = NULL;
    if (!path) return oc_fail(err, OC_ERR_INVALID, "safetensors: NULL path");
    oc_safetensors_set *set = oc_mem_calloc(alloc, sizeof *set);
    if (!set) return oc_fail(err, OC_ERR_NOMEM, "safetensors: cannot allocate a set");
    set->alloc = (alloc && alloc->fn) ? *alloc : *oc_default_allocator();
    oc_status s;
    if (!ends_with(path, ".json")) {
        s = add_file(set, path, err);
        if (!s) s = build_union(set, err);
    } else {
        oc_port_mapping map;
        char msg[OC_ERROR_MESSAGE_BYTES];
        if (oc_port_map_file(path, &map, msg, sizeof msg) != 0) {
            oc_safetensors_set_close(set);
            return oc_fail(err, OC_ERR_IO, "%s", msg);
        }
        oc_json *doc = NULL;
        oc_error je = { OC_OK, "" };
        s = oc_json_parse(&doc, map.data, map.n_bytes, NULL, &set->alloc, &je);
        oc_port_unmap_file(&map);
        if (s) {
            s = oc_fail(err, s, "%.100s: %s", path, je.message);
        } else {
            const char *slash = strrchr(path, '/');
            size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
            s = open_index(set, path, path, dir_len, doc, err);
        }
        oc_json_free(doc);
    }
    if (s) {
        oc_safetensors_set_close(set);
        return s;
    }
    *out = set;
    return OC_OK;
}

size_t oc_safetensors_set_n_files(const oc_safetensors_set *set) { return set ? set->n_files : 0; }
size_t oc_safetensors_set_n_tensors(const oc_safetensors_set *set) { return set ? set->n_tensors : 0; }

const oc_st_tensor *oc_safetensors_set_tensor_at(const oc_safetensors_set *set, size_t i) {
    return (set && i < set->n_tensors) ? set->by_name[i] : NULL;
}

const oc_st_tensor *oc_safetensors_set_find(const oc_safetensors_set *set, const char *name) {
    if (!set || !name || !set->n_tensors) return NULL;
    oc_st_tensor key;
    key.name.ptr = name;
    key.name.len = strlen(name);
    const oc_st_tensor *kp = &key;
    const oc_st_tensor *const *hit = bsearch(&kp, set->by_name, set->n_tensors, sizeof *set->by_name, cmp_tensor_ptr);
    return hit ? *hit : NULL;
}
