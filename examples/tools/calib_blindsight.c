/* calib_blindsight.c: BlindSight's head categories (blindsight.txt Sec. 4): Alg. 1 picks, per
 * prompt, the cheapest mask whose attention output stays within alpha NMSE of dense attention;
 * Alg. 2 turns the per-prompt picks of a data set into one category per head by the gamma
 * fractions. The squared errors come from oc_calib_mask_errors (calib_stats.c). */
#include "tools/calib.h"

/* Alg. 1, lines 221-227: masks in the paper's order (lowest FLOPs first: Sink keeps the fewest
 * image keys); the first below alpha wins. */
oc_pattern_kind oc_calib_bs_choose(const double err_sq[3], double ref_sq, double alpha) {
    static const oc_pattern_kind order[OC_CALIB_N_BS_MASKS] = {
        OC_PATTERN_SINK, OC_PATTERN_INTRA_IMAGE, OC_PATTERN_INTRA_IMAGE_SINK,
    };
    for (int m = 0; m < OC_CALIB_N_BS_MASKS; m++) {
        if (ref_sq <= 0.0) return order[m];   /* nothing to lose: every output is zero */
        if (err_sq[m] / ref_sq < alpha) return order[m];
    }
    return OC_PATTERN_DENSE;
}

/* Sec. 5 gives alpha_layer = 0.005 + (0.195 - 0.005) * layer_idx / num_layers for Gemma 3 (12B) and
 * 0.001 .. 0.099 for smaller models with less sparsity; the last layer never reaches the end value. */
double oc_calib_bs_alpha(const oc_calib_params *p, int32_t layer, int32_t n_layers) {
    if (!(p->bs_alpha_end > 0.0) || n_layers <= 0) return p->bs_alpha;
    return p->bs_alpha + (p->bs_alpha_end - p->bs_alpha) * (double)layer / (double)n_layers;
}

/* Alg. 2 (Sec. 4.2): the dense fraction is checked first ("the cautious strategy"), then the
 * predominant sparse categories in the paper's order. Strict inequalities as written. */
oc_pattern_kind oc_calib_bs_aggregate(const int32_t counts[OC_PATTERN_COUNT], int32_t n, double gamma_d,
                                      double gamma_s, double gamma_i) {
    if (n <= 0) return OC_PATTERN_DENSE;
    double f_dense = (double)counts[OC_PATTERN_DENSE] / n, f_sink = (double)counts[OC_PATTERN_SINK] / n,
           f_intra = (double)counts[OC_PATTERN_INTRA_IMAGE] / n;
    if (f_dense > gamma_d) return OC_PATTERN_DENSE;
    if (f_sink > gamma_s) return OC_PATTERN_SINK;
    if (f_intra > gamma_i) return OC_PATTERN_INTRA_IMAGE;
    return OC_PATTERN_INTRA_IMAGE_SINK;
}
