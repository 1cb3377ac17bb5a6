/* calib_zipvl.c: ZipVL's layer-adaptive important-token ratio (zipvl.txt Sec. 4.1, Eq. 6-7) as a
 * per-layer threshold tau for the plan. The paper fixes tau = 0.975 (Sec. 5.3.2: accuracy holds
 * down to about 0.97 and falls below it); calibration keeps that default and lowers a layer to
 * 0.97 only where the measured mass curve makes it worth it: the layer then keeps at least 10% fewer
 * tokens. The column sums come from oc_calib_column_mass (two passes over key tiles per row).
 * Ours, beyond the paper: the output check (calib.h OC_CALIB_ZIPVL_MAX_NMSE; measured in
 * calib_run.c, zipvl_check): a layer where Alg. 1 destroys most of the attention output is left
 * dense. */
#include "tools/calib.h"

#include <stdlib.h>
#include <string.h>

static int by_value_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int32_t oc_calib_zipvl_p(const double *col_sum, int32_t n, double total, double tau, double *scratch) {
    memcpy(scratch, col_sum, sizeof(double) * (size_t)n);
    qsort(scratch, (size_t)n, sizeof(double), by_value_desc);
    double acc = 0.0, want = tau * total;
    for (int32_t p = 0; p < n; p++) {
        acc += scratch[p];
        if (acc >= want) return p + 1;
    }
    return n;   /* rounding left the sum a hair short: every token */
}

double oc_calib_zipvl_tau(double ratio_at_tau, double ratio_at_low) {
    if (ratio_at_tau > 0.0 && ratio_at_low <= (1.0 - OC_CALIB_ZIPVL_MIN_GAIN) * ratio_at_tau) return OC_CALIB_ZIPVL_TAU_LOW;
    return OC_CALIB_ZIPVL_TAU;
}

int oc_calib_zipvl_keeps_layer(double nmse, double max_nmse) { return !(nmse > max_nmse); }
