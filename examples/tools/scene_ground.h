/* scene_ground.h: the grounding of a scene item's answer: the grid cells (28 px, one merged
 * language token each when the image is not resized) of the shapes the answer is read from. */
#ifndef OC_SCENE_GROUND_H
#define OC_SCENE_GROUND_H

#include "tools/scene.h"

/* cells: n_images * grid * grid bytes, image g's cell (row, col) at g * grid * grid + row * grid + col;
 * set to 1 for the cells of the shapes that hold the answer (the named shape; for counts, the shapes
 * counted; for "which image" and comparisons, the matching shapes of the image answered), 0
 * elsewhere. Returns the number of cells set (0: the answer is not in any shape, e.g. a count of 0). */
int32_t oc_scene_ground(const oc_scene_desc *desc, const oc_scene_item *item, uint8_t *cells);

#endif
