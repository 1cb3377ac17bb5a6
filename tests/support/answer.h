/* answer.h: an oc_request.on_text callback that gathers the streamed answer into a buffer (the
 * tests that ask questions through the public API share it). */
#ifndef OC_TEST_ANSWER_H
#define OC_TEST_ANSWER_H

#include <stddef.h>

typedef struct answer { char text[4096]; size_t n; } answer;   /* zero it before the ask */

/* Appends text while it fits (the rest is dropped); always 0: never asks to stop. */
int collect(void *user, const char *text, size_t n_bytes);

#endif
