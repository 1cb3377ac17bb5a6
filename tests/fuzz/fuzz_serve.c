/* fuzz_serve.c: libFuzzer target for the server's request path (examples/serve/serve_request.c):
 * a /v1/chat/completions body -> serve_parse_chat (JSON, message roles, content parts, numbers,
 * stop sequences, base64 data: URIs), then every decoded image through oc_image_decode with the
 * server's limits and the OpenAI error body for a refused one. --allow-files is off, as by default. */
#include "serve/serve.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    serve_limits lim;
    serve_limits_default(&lim);
    lim.max_body_bytes = 1 << 16;
    lim.max_json_nodes = 512;
    serve_chat chat;
    serve_error err;
    int rc = serve_parse_chat((const char *)data, size, &lim, &chat, &err);
    if (rc) {
        serve_buf b = { 0 };
        serve_error_json(&b, &err);
        serve_buf_free(&b);
        return 0;
    }
    oc_image_limits il;
    oc_image_limits_default(&il);
    il.max_pixels = 1 << 16;
    il.reduce_to_pixels = 1 << 16;
    for (int i = 0; i < chat.n_images; i++) {
        oc_image img;
        oc_error e;
        if (oc_image_decode(&img, chat.images[i].bytes, chat.images[i].n_bytes, &il, NULL, &e) == OC_OK) oc_image_free(&img);
    }
    serve_buf b = { 0 };
    serve_buf_json_str(&b, chat.question, strlen(chat.question));
    serve_buf_free(&b);
    serve_chat_free(&chat);
    return 0;
}
