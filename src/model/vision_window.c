/* vision_window.c: Qwen2.5-VL window attention order (HF Qwen2_5_VisionTransformerPretrainedModel
 * .get_window_index, docs/formats.md §2b step 3). HF pads the merged grid up to whole windows with -100
 * and drops the padding, so edge windows are partial and a fully padded row/column of windows
 * (when a side is already a multiple of the window) yields empty windows that cu_seqlens'
 * unique_consecutive removes: cutting the grid into ceil(side / win) windows per side is the same. */
#include "model/vision_model.h"

int32_t oc_vision_window_order(int32_t merged_h, int32_t merged_w, int32_t win, int32_t unit,
                               int32_t *order, oc_token_span *windows) {
    int32_t k = 0, n_windows = 0;
    for (int32_t y0 = 0; y0 < merged_h; y0 += win) {
        for (int32_t x0 = 0; x0 < merged_w; x0 += win) {
            int32_t start = k;
            for (int32_t y = y0; y < merged_h && y < y0 + win; y++)
                for (int32_t x = x0; x < merged_w && x < x0 + win; x++) order[k++] = y * merged_w + x;
            windows[n_windows].start = start * unit;
            windows[n_windows].end = k * unit;
            n_windows++;
        }
    }
    return n_windows;
}
