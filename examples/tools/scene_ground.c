/* scene_ground.c: which cells of a scene hold the answer to its question, for SparseMM's visual
 * head scores (sparsemm.txt Alg. 1 matches each answer token to the image region it reads from;
 * here the scene description says it by construction). Standard C only, like scene.c. */
#include "tools/scene_ground.h"

#include <string.h>

/* The image whose shapes the answer is read from: the asked image, or for "which image" and
 * "compare" the image the answer names. */
static int32_t answer_image(const oc_scene_desc *d, const oc_scene_item *it) {
    if (d->q.type == OC_SCENE_WHICH_IMAGE || d->q.type == OC_SCENE_COMPARE) {
        int32_t k = 0;
        for (const char *s = it->answer; *s >= '0' && *s <= '9'; s++) k = k * 10 + (*s - '0');
        return k - 1;
    }
    return d->q.image_a;
}

int32_t oc_scene_ground(const oc_scene_desc *d, const oc_scene_item *it, uint8_t *cells) {
    size_t per_image = (size_t)d->grid * (size_t)d->grid;
    memset(cells, 0, per_image * (size_t)d->n_images);
    int32_t g = answer_image(d, it), n = 0;
    if (g < 0 || g >= d->n_images) return 0;
    const oc_scene_image *im = &d->images[g];
    for (int32_t s = 0; s < im->n_shapes; s++) {
        const oc_scene_shape *sh = &im->shapes[s];
        /* the shapes the question names (an unset colour or kind matches all; "how many shapes"
         * names every shape) */
        if (d->q.color >= 0 && sh->color != d->q.color) continue;
        if (d->q.kind >= 0 && sh->kind != d->q.kind) continue;
        cells[(size_t)g * per_image + (size_t)sh->row * (size_t)d->grid + (size_t)sh->col] = 1;
        n++;
    }
    return n;
}
