/* ocellus.h: the public API of ocellus (models, contexts, asking), a portable CPU-first C runtime for small
 * vision-language models (Qwen2-VL, Qwen2.5-VL) with sparse attention driven by head plans.
 * Anything not declared in this file or in ocellus_gguf.h (the GGUF reader and writer, for programs
 * that handle GGUF files themselves) is not API.
 *
 * Quick start: the block after this comment is a whole program (tests/test_quickstart.sh compiles
 * and runs it, and the same program in README.md, with the demo model): one model, one context
 * with the default limits, one question about a picture file, the answer streamed to stdout.
 * examples/embed/embed.c goes further: the host's own allocator, a frame passed as pixels.
 * Then: models, contexts and asking; status codes and the allocator.
 *
 * Rules that hold for every function here
 *  - Functions that can fail return an oc_status and, when given a non-NULL oc_error *err,
 *    write a one-line message naming the problem (file, key, offset...) into it.
 *  - Constructors write the new object through an out-parameter; on failure *out is NULL.
 *  - Every close/free function accepts NULL.
 *  - All memory comes from the oc_allocator you pass (NULL selects malloc/free). There is no
 *    global state: two models with two allocators coexist in one process.
 *  - Pointers returned by getters are borrowed: valid until the owning object is closed.
 *
 * Compile-time knobs (all in config.h, written by ./configure):
 *  @@ OC_HAVE_AVX2_KERNELS / OC_HAVE_AVX512_KERNELS / OC_HAVE_NEON_KERNELS  SIMD kernels built
 *  @@ OC_HAVE_NEON_DOTPROD  SDOT int8 kernels built (used when the CPU has them)
 *  @@ OC_HAVE_NEON_BF16  BFDOT BF16 GEMM kernel built (used when the CPU has it)
 *  @@ OC_HAVE_NEON_I8MM  SMMLA int8 and BFMMLA BF16 GEMM kernels built (used when the CPU has I8MM and BF16)
 *  @@ OC_HAVE_OPENCL, OC_HAVE_CLBLAST, OC_HAVE_SLEEF, OC_HAVE_LIBJPEG, OC_HAVE_LIBPNG
 */
#if 0 /* quick start >>> */
#include <ocellus.h>
#include <stdio.h>

static int print_piece(void *user, const char *text, size_t n_bytes) {
    (void)user;
    fwrite(text, 1, n_bytes, stdout);   /* the answer as it is generated; nonzero would stop it */
    return 0;
}

int main(int argc, char **argv) {       /* ./ask TEXT.gguf MMPROJ.gguf PICTURE "QUESTION" */
    if (argc != 5) return 2;
    oc_error err;
    oc_model *model = NULL;
    oc_context *ctx = NULL;
    oc_context_params params;
    oc_context_params_default(&params);                                 /* all cores, 4096 tokens */
    oc_request req;
    oc_request_default(&req);
    req.question = argv[4];
    req.image_paths = (const char *const *)&argv[3];                    /* PPM, JPEG or PNG */
    req.n_images = 1;
    req.on_text = print_piece;
    oc_status st = oc_model_open(&model, argv[1], argv[2], NULL, &err); /* NULL: malloc */
    if (st == OC_OK) st = oc_context_open(&ctx, model, &params, &err);  /* all its memory, now */
    if (st == OC_OK) st = oc_ask(ctx, &req, &err);
    if (st == OC_OK) printf("\n"); else fprintf(stderr, "error: %s\n", err.message);
    oc_context_close(ctx);                                              /* both accept NULL */
    oc_model_close(model);
    return st != OC_OK;
}
#endif /* <<< quick start */

#ifndef OCELLUS_H
#define OCELLUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OC_VERSION_MAJOR 0
#define OC_VERSION_MINOR 1
#define OC_VERSION_PATCH 0
#define OC_VERSION_STRING "0.1.0"

/* Export macro: the only compiler-specific block outside port/. */
#if defined(OC_BUILDING_LIBRARY) && (defined(__GNUC__) || defined(__clang__))
#define OC_API __attribute__((visibility("default")))
#else
#define OC_API
#endif

/* ---- status and errors ------------------------------------------------------------------- */

typedef enum oc_status {
    OC_OK = 0,
    OC_ERR_NOMEM,        /* the allocator returned NULL */
    OC_ERR_INVALID,      /* a caller passed an invalid argument (API misuse) */
    OC_ERR_IO,           /* a file could not be opened, mapped or read */
    OC_ERR_FORMAT,       /* malformed input: GGUF, plan file, image, JSON, safetensors ... */
    OC_ERR_NOT_FOUND,    /* a requested key, tensor or token does not exist */
    OC_ERR_TYPE,         /* a value exists but has another type than the one asked for */
    OC_ERR_UNSUPPORTED,  /* valid input this build or this model cannot handle */
    OC_ERR_RANGE,        /* a size or count exceeds a stated limit (context, image size ...) */
    OC_ERR_DEVICE,       /* an accelerator (OpenCL) call failed */
    OC_ERR_ABORTED       /* the caller's abort callback asked to stop */
} oc_status;

/* A short constant name for a status, e.g. "format error". Never NULL. */
OC_API const char *oc_status_str(oc_status status);

#define OC_ERROR_MESSAGE_BYTES 256
typedef struct oc_error {
    oc_status status;
    char message[OC_ERROR_MESSAGE_BYTES]; /* NUL-terminated, one line */
} oc_error;

/* ---- memory --------------------------------------------------------------------------------- */

/* One function does everything, as lua_Alloc does:
 *   new_bytes == 0           free ptr (old_bytes is its size), return NULL
 *   ptr == NULL              allocate new_bytes
 *   otherwise                resize from old_bytes to new_bytes
 * ocellus aligns what it needs itself; the function need only return malloc-aligned memory. */
typedef void *(*oc_alloc_fn)(void *user, void *ptr, size_t old_bytes, size_t new_bytes);
typedef struct oc_allocator {
    oc_alloc_fn fn;
    void *user;
} oc_allocator;

/* ---- models, contexts, asking ---------------------------------------------------------------- */
/* A model is the text GGUF (arch "qwen2vl") plus, for images, its mmproj GGUF, as llama.cpp's
 * converter or `ocellus convert` write them. It is read-only once open: any number of contexts,
 * in any threads, may use one model at the same time. A context holds everything one
 * conversation mutates (KV cache, activations, scratch, image work); its memory is computed from
 * its limits and allocated when it opens (oc_context_memory_bytes says how much, to the byte),
 * and oc_ask allocates nothing: not per image, not per token. (libjpeg and libpng, decoding
 * oc_request.image_paths, keep their own working rows with malloc.) */
typedef struct oc_model oc_model;
typedef struct oc_context oc_context;

/* mmproj_path may be NULL (text only). Messages name the file and the problem. The files are
 * mapped (oc_model_open_params can read them instead): weights are paged in from the file as
 * they are used, and the files must not change while the model is open: truncating a mapped
 * file kills the process with SIGBUS, rewriting it changes the weights under the model.
 * [errors: OC_ERR_IO, OC_ERR_FORMAT, OC_ERR_UNSUPPORTED, OC_ERR_TYPE, OC_ERR_NOMEM] */
OC_API oc_status oc_model_open(oc_model **out, const char *text_path, const char *mmproj_path,
                               const oc_allocator *alloc, oc_error *err);

typedef enum oc_load_mode {
    OC_LOAD_MAP = 0,    /* map the files (default): fast to open, shared page cache, see above */
    OC_LOAD_READ = 1    /* read them into memory from the allocator: the files' size in memory,
                           and the model survives the files changing or vanishing underneath */
} oc_load_mode;
typedef struct oc_model_params {
    const char *text_path;        /* the language model GGUF */
    const char *mmproj_path;      /* the vision encoder GGUF, or NULL (text only) */
    const oc_allocator *alloc;    /* NULL: malloc */
    oc_load_mode load;
} oc_model_params;
OC_API void oc_model_params_default(oc_model_params *params);
/* oc_model_open with the load mode. [errors: as oc_model_open] */
OC_API oc_status oc_model_open_params(oc_model **out, const oc_model_params *params, oc_error *err);
OC_API void oc_model_close(oc_model *model);

typedef struct oc_model_info {
    int32_t n_vocab, n_embd, n_layers, n_head, n_head_kv, head_dim, n_ff;
    int has_vision;
    const char *projector;            /* "qwen2vl_merger", "qwen2.5vl_merger" or "" */
    int32_t vision_layers, vision_hidden, vision_heads;
    int32_t n_ctx_train;              /* the model's context length (qwen2vl.context_length) */
    size_t memory_bytes;              /* what the model holds: its mapped files plus what opening
                                         allocated (a read copy of the files included) */
} oc_model_info;
OC_API void oc_model_get_info(const oc_model *model, oc_model_info *out);

typedef void (*oc_progress_fn)(void *user, const char *stage, int32_t done, int32_t total);

/* Where a context runs the model (oc_context_params.backend). On OpenCL the whole forward pass
 * (vision encoder and language model) runs on the device: weights are uploaded once when the
 * context opens, activations and the KV cache stay there, and only the logits come back. */
typedef enum oc_backend_choice {
    OC_BACKEND_CPU = 0,           /* the thread pool (default) */
    OC_BACKEND_OPENCL,            /* an OpenCL device (params.device); opening the context fails
                                     when there is none or it cannot run the model (the message
                                     says which: no platform / device, a program that did not
                                     build, an unsupported head size) */
    OC_BACKEND_AUTO               /* OpenCL when that opens, else the CPU (oc_context_backend_name
                                     says which ran and why) */
} oc_backend_choice;

/* One decoder layer's attention inputs as the forward pass computed them, for calibration tools
 * (`ocellus calibrate`): what oc_context_params.on_attention sees before the layer's attention.
 * Host memory in f32, borrowed for the call. Decoder: query row i is token q_first + i and attends
 * causally to keys 0 .. q_first + i; keys and values come from the KV cache (so they are
 * f16-rounded, as the attention engine reads them). Vision encoder (stack 1, one call per layer
 * per image): q_first 0, n_q = n_kv = the image's patches (in window order for Qwen2.5-VL),
 * n_head_kv = n_head, each patch attending to every patch of its segment. */
typedef struct oc_attn_view {
    int32_t stack;                   /* 0: the decoder (causal); 1: the vision encoder, one image,
                                        attention bidirectional within each segment */
    int32_t layer;
    int32_t n_q, q_first;            /* the query rows of this forward call */
    int32_t n_kv;                    /* q_first + n_q: every key and value cached so far */
    int32_t n_head, n_head_kv, head_dim;   /* query head h reads kv head h / (n_head / n_head_kv) */
    const float *q;                  /* [n_q][n_head * head_dim], after M-RoPE */
    const float *k, *v;              /* [n_kv][n_head_kv * head_dim], k after M-RoPE */
    int32_t n_prompt_tokens;         /* rows below it are the prompt (prefill), later ones decode */
    int32_t n_images;
    const int32_t *images;           /* [n_images][4]: first token, tokens, grid rows, grid cols */
    int32_t n_segments;              /* vision: the attention windows (one for a full layer) */
    const int32_t *segments;         /* vision: [n_segments][2] = [start, end) patches; decoder: NULL */
} oc_attn_view;
typedef void (*oc_attn_observer_fn)(void *user, const oc_attn_view *view);

typedef struct oc_context_params {
    int32_t max_context_tokens;   /* KV cache length (default 4096); clamped to the model's
                                     context length (oc_model_info.n_ctx_train) */
    int32_t max_images;           /* images per question (default 8) */
    int32_t max_image_tokens;     /* LLM tokens per image after the 2x2 merge (default 1280 =
                                     HF's default max_pixels 1003520 / 28^2); larger images are
                                     scaled down (smart_resize) */
    int32_t min_image_tokens;     /* default 4 (HF min_pixels 3136 / 28^2) */
    int32_t batch_tokens;         /* prefill chunk: prompt tokens per forward call. 0 (default):
                                     per backend: 256 on the CPU and OC_BACKEND_AUTO; on OpenCL
                                     the largest chunk whose activations and logits row per token
                                     fit 512 MiB of device memory, 256..4096 tokens (fewer
                                     launches per prompt) */
    int n_threads;                /* 0: every online CPU */
    const char *plan_path;        /* attention plan file, or NULL: dense attention */
    const oc_allocator *alloc;    /* NULL: malloc */
    oc_progress_fn progress;      /* "vision" / "prefill" progress, may be NULL */
    void *progress_user;
    oc_backend_choice backend;    /* default OC_BACKEND_CPU */
    const char *device;           /* OpenCL device: index ("1") or name substring; NULL: the
                                     first GPU. Ignored by the CPU backend. */
    /* Calibration hook, may be NULL: called for every decoder layer of every forward call and
     * every vision encoder layer of every image with the layer's queries, keys and values
     * (oc_attn_view); it describes the dense KV cache, so decoder layers whose cache a plan's KV
     * sections evict or share (SparseMM, ZipVL, Q-Cache) are not reported. When set, the context
     * allocates two f32 copies of one layer's KV cache and one batch of queries at open; when NULL
     * it costs nothing. It must not call back into the context. */
    oc_attn_observer_fn on_attention;
    void *attention_user;
    int64_t max_image_pixels;     /* the buffer oc_ask decodes oc_request.image_paths into: this
                                     many RGB8 pixels (default 4194304 = 2048 x 2048, up to
                                     28 MiB with a PNG decoder's rows; 0:
                                     none, images come as pixels only); larger JPEG and PNG files
                                     are decoded at reduced scale to fit, others refused */
    int32_t max_answer_tokens;    /* with a plan's SparseMM kv budgets: the room each budgeted
                                     layer's KV cache keeps after the prompt (default 256), so the
                                     cache is allocated at budget + this instead of the whole
                                     context; an answer longer than it fails with OC_ERR_RANGE.
                                     0: the whole context (no bound) */
    int profile;                  /* 1: on OpenCL each step that oc_stats times waits for the
                                     device before and after, so its time is its own (slower);
                                     0 (default): no waits. The CPU ignores it. */
} oc_context_params;
OC_API void oc_context_params_default(oc_context_params *params);
/* The host bytes oc_context_open will allocate for these limits (KV cache, activations, scratch,
 * image work), without allocating: exactly what open takes from the allocator, oc_mem headers
 * included. The image work is sized for the worst image the limits let through: any shape with
 * sides up to OC_IMAGE_DEFAULT_MAX_SIDE_PX, resized to at most max_image_tokens (its patches,
 * 24 bytes per resized pixel, dominate), plus one decoded file when max_image_pixels > 0. On OpenCL the KV cache, activations and weights live in
 * device memory (oc_stats.device_bytes) and this counts the host side only (not the driver's own
 * memory); for OC_BACKEND_AUTO it is the CPU figure, the larger one.
 * [errors: OC_ERR_INVALID, OC_ERR_RANGE, OC_ERR_UNSUPPORTED (backend not available)] */
OC_API oc_status oc_context_memory_bytes(const oc_model *model, const oc_context_params *params,
                                         size_t *bytes, oc_error *err);
/* [errors: OC_ERR_INVALID, OC_ERR_RANGE, OC_ERR_NOMEM, OC_ERR_UNSUPPORTED (backend not
 * available), plan file errors (OC_ERR_IO, OC_ERR_FORMAT, OC_ERR_UNSUPPORTED when it does not
 * fit the model); OpenCL: OC_ERR_NOT_FOUND (no platform or device, or none matches
 * params.device: the message lists them), OC_ERR_DEVICE (a program did not build, a device call
 * failed: the message names it)] */
OC_API oc_status oc_context_open(oc_context **out, const oc_model *model,
                                 const oc_context_params *params, oc_error *err);
OC_API void oc_context_close(oc_context *ctx);
/* Where ctx runs, for logs: "CPU (avx2, 4 threads)", "OpenCL, <device> (<platform>)", or with
 * OC_BACKEND_AUTO after a fallback "CPU (avx2, 4 threads); OpenCL not used: <why>". Borrowed:
 * valid until ctx is closed. */
OC_API const char *oc_context_backend_name(const oc_context *ctx);

/* RGB8 pixels, rows stride_bytes apart (>= 3 * width_px); borrowed for the call. */
typedef struct oc_image_rgb {
    const uint8_t *rgb;
    int32_t width_px, height_px;
    size_t stride_bytes;
} oc_image_rgb;

/* ---- decoding images ----------------------------------------------------------------------------
 * PNM (P2, P3, P5, P6), JPEG (libjpeg) and PNG (libpng) when the build has them, always to RGB8
 * as Pillow's convert("RGB") gives (alpha over white). A decoder checks the declared size against
 * the limits before it allocates anything: a small file that declares a huge image (a
 * decompression bomb: a 1 MB PNG of 16384 x 16384 pixels would need 805 MB) is refused, or with
 * reduce_to_pixels decoded at reduced scale. */
typedef struct oc_image {
    uint8_t *rgb;              /* row y starts at rgb + y * stride_bytes */
    int32_t width_px;
    int32_t height_px;
    size_t stride_bytes;
    size_t alloc_bytes;        /* bytes owned by this image (0: a borrowed view) */
    oc_allocator alloc;        /* the allocator that owns rgb when alloc_bytes != 0 */
} oc_image;

#define OC_IMAGE_DEFAULT_MAX_SIDE_PX 16384
typedef struct oc_image_limits {
    int64_t max_width_px;      /* declared sides beyond these are refused (default 16384) */
    int64_t max_height_px;
    int64_t max_pixels;        /* decoded pixels at most: 3 bytes each (default 16384^2) */
    int64_t reduce_to_pixels;  /* 0 (default): an image of more than max_pixels is refused
                                  (OC_ERR_RANGE). > 0: JPEG is decoded at 1/2, 1/4 or 1/8 scale
                                  (libjpeg's DCT scaling) to the smallest size that keeps at least
                                  this many pixels and fits max_pixels; a non-interlaced PNG that
                                  does not fit is averaged over f x f blocks as its rows arrive,
                                  with the smallest f that fits. PNM and interlaced PNG are refused. */
} oc_image_limits;
OC_API void oc_image_limits_default(oc_image_limits *limits);

/* Decode any supported format (detected by magic bytes). limits may be NULL (defaults), alloc NULL
 * (malloc). On failure *out is zeroed and owns nothing.
 * [alloc: the pixels and the decoder's state through alloc, and a progressive (multi-scan) JPEG's
 * coefficients, at most 4 bytes per max_pixels (a larger such file is OC_ERR_RANGE); libjpeg and
 * libpng also allocate their own working memory (rows, tables: O(width)) with malloc]
 * [errors: OC_ERR_FORMAT, OC_ERR_RANGE (limits), OC_ERR_UNSUPPORTED (a format this build lacks),
 *  OC_ERR_NOMEM, OC_ERR_INVALID] */
OC_API oc_status oc_image_decode(oc_image *out, const void *bytes, size_t n_bytes,
                                 const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err);
/* Read the file at path and decode it; messages name the path. [errors: as above + OC_ERR_IO] */
OC_API oc_status oc_image_load(oc_image *out, const char *path, const oc_image_limits *limits,
                               const oc_allocator *alloc, oc_error *err);
/* Release what the image owns and zero it. NULL is a no-op. */
OC_API void oc_image_free(oc_image *img);
/* A view of img for oc_request.images (borrowed: valid while img is). */
OC_API oc_image_rgb oc_image_view(const oc_image *img);

/* temperature <= 0 (the default) or top_k == 1: greedy. Otherwise top-k (0: off), softmax with
 * the temperature, top-p, then a draw from a generator seeded with seed. */
typedef struct oc_sampling {
    float temperature;            /* default 0 */
    int32_t top_k;                /* default 40 */
    float top_p;                  /* default 0.95 */
    uint64_t seed;                /* default 0 */
} oc_sampling;

/* Called with each new piece of the answer (UTF-8, never a partial character). Return nonzero
 * to stop generating. */
typedef int (*oc_text_fn)(void *user, const char *text, size_t n_bytes);

typedef struct oc_request {
    const char *system;           /* NULL: "You are a helpful assistant." */
    const char *question;         /* must not be empty */
    const oc_image_rgb *images;   /* shown before the question, in order */
    int32_t n_images;
    int32_t max_new_tokens;       /* default 256 */
    /* -1 (default): as the model's chat template does; 1: "Picture N: " before image N, as
     * Qwen2-VL's template renders with add_vision_id; 0: no labels. */
    int32_t image_labels;
    oc_sampling sampling;
    oc_text_fn on_text;           /* may be NULL */
    void *user;
    /* With images NULL: n_images image files (PNM, JPEG, PNG) that oc_ask decodes itself, one at
     * a time just before encoding each, into the context's image work memory (max_image_pixels:
     * part of the context's memory bound), a JPEG straight at the model's input size (DCT
     * scaling). */
    const char *const *image_paths;
} oc_request;
OC_API void oc_request_default(oc_request *req);

/* One single-turn question (the context's previous conversation is dropped): encodes the
 * images, builds the Qwen2-VL chat prompt, prefills, and generates until <|im_end|>,
 * <|endoftext|>, max_new_tokens or on_text asks to stop. Before any image is decoded or
 * encoded, the prompt is measured from the images' sizes (a file's header), so a context
 * overflow is refused at once.
 * [alloc: no] [errors: OC_ERR_INVALID (empty question, bad image, a question about "image N"
 * or "picture N" with fewer than N images given (none included), or about image 0), OC_ERR_RANGE
 * (too many images, an image larger than the limits: sides above OC_IMAGE_DEFAULT_MAX_SIDE_PX,
 * or more than max_image_tokens after resizing, which smart_resize gives near aspect 200, a
 * progressive JPEG whose coefficients exceed 4 bytes per max_image_pixels; context full),
 * OC_ERR_UNSUPPORTED (images without an mmproj)] */
OC_API oc_status oc_ask(oc_context *ctx, const oc_request *req, oc_error *err);

typedef struct oc_stats {
    int32_t n_images, n_image_tokens, n_prompt_tokens, n_generated;
    double vision_ms;             /* preprocessing + encoding of every image */
    double prefill_ms;            /* prompt through the language model */
    double ttft_ms;               /* request start to the first generated token */
    double decode_ms;             /* the tokens after the first */
    uint64_t attn_flops_kept, attn_flops_skipped;   /* attention FLOPs (vision + decoder) */
    /* ... of which the decoder's prompt rows (prefill) and its generated rows (decode); the rest is
     * the vision encoder's. Keys a plan's KV eviction (SparseMM budgets, ZipVL) removed count as
     * skipped in decode: a generated row skips every earlier position its layer no longer holds */
    uint64_t attn_prefill_flops_kept, attn_prefill_flops_skipped;
    uint64_t attn_decode_flops_kept, attn_decode_flops_skipped;
    size_t context_bytes;         /* what the context allocated up front (host) */
    size_t device_bytes;          /* OpenCL: device memory its weights, KV cache and activations
                                     hold; 0 on the CPU */
    size_t kv_bytes;              /* f16 keys and values the decoder's KV cache holds at the end of
                                     the request: after the plan's SparseMM / ZipVL eviction, without
                                     the keys Q-Cache GLA lazy layers share */
    size_t kv_prefill_bytes;      /* the same at the end of prefill, before the first generated token */
    size_t kv_capacity_bytes;     /* what the KV cache buffers take (fixed at open from the plan
                                     and the context size, part of context_bytes or device_bytes):
                                     with SparseMM budgets, each budgeted layer's budget +
                                     max_answer_tokens rows plus the whole prompt of one layer
                                     (or lazy group) at a time while it is prefilled */
    uint64_t peak_rss_bytes;      /* the whole process's peak resident set so far (0: unknown) */
    /* Where the decoder's prefill and decode time went (ocellus bench plans): its attention calls
     * (index estimation included), MMInference's index estimation and choice alone, SparseMM /
     * ZipVL's scoring of the observed rows, and their choice of kept tokens with the compaction
     * of the cache. On OpenCL these are host times of queued work unless the context was opened
     * with profile = 1. */
    double prefill_attn_ms, prefill_estimate_ms, prefill_kv_score_ms, prefill_kv_select_ms;
    double decode_attn_ms;
} oc_stats;
OC_API void oc_context_get_stats(const oc_context *ctx, oc_stats *out);
/* The logits at the last prompt position of the latest oc_ask ([n_vocab] floats), or NULL. */
OC_API const float *oc_context_prompt_logits(const oc_context *ctx, int32_t *n_vocab);

#ifdef __cplusplus
}
#endif
#endif /* OCELLUS_H */
