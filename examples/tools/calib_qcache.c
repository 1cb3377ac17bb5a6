/* calib_qcache.c: Q-Cache's lazy blocks (qcache.txt Sec. 3.2, Eq. 4): adjacent layers whose
 * attention is alike (mean Jensen-Shannon divergence of the last attention row over the samples,
 * Eq. 3, below epsilon) share the first layer's Q and K. Blocks are capped in size because errors
 * accumulate between distant layers (Sec. 3.2). The divergences come from calib_run.c. */
#include "tools/calib.h"

int32_t oc_calib_qc_groups(const double *s_adjacent, int32_t n_layers, double epsilon, int32_t max_group,
                           int32_t *first, int32_t *last) {
    int32_t n = 0;
    for (int32_t l = 0; l < n_layers;) {
        int32_t end = l;   /* the block is l..end */
        while (end + 1 < n_layers && end - l + 1 < max_group && s_adjacent[end] < epsilon) end++;
        if (end > l) {
            first[n] = l;
            last[n] = end;
            n++;
        }
        l = end + 1;
    }
    return n;
}
