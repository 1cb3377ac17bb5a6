#include "support/answer.h"

#include <string.h>

int collect(void *user, const char *text, size_t n_bytes) {
    answer *a = user;
    if (a->n + n_bytes < sizeof a->text) {
        memcpy(a->text + a->n, text, n_bytes);
        a->n += n_bytes;
        a->text[a->n] = '\0';
    }
    return 0;
}
