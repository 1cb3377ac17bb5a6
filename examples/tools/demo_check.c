/* demo_check.c: does a question fall inside what the demo model was trained on? The demo
 * (examples/demo/) learned only examples/tools/scene.c's world: 1-8 synthetic scenes of 112 x 112
 * px (shapes on plain backgrounds) and the eight question templates written there. Outside it the
 * model still answers, with a confident guess (a photo of a blue circle gets "4"), so `ocellus ask`
 * warns on stderr when a question or a picture is outside. The vocabulary below is scene.c's;
 * tests/test_demo_check.c checks that every question scene.c writes is accepted. */
#include "tools/tools.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define DEMO_SIDE_PX 112   /* examples/demo/TRAINING.md: every training image is 112 x 112 */
#define DEMO_MAX_IMAGES 8

static const char *const kinds[] = { "circle", "square", "triangle", "diamond", NULL };
static const char *const colors[] = { "red", "green", "blue", "yellow", "purple", "orange", "white", NULL };
static const char *const articles[] = { "an", "a", NULL };

/* scene.c's templates: %K a shape kind, %C a colour, %A an article, %N an image number. */
static const char *const templates[] = {
    "What color is the %K in image %N?",
    "How many shapes are in image %N?",
    "How many %C shapes are in image %N?",
    "How many %Ks are in image %N?",
    "Is the %C %K in image %N at the top or the bottom?",
    "Is the %C %K in image %N on the left or the right?",
    "Which image has %A %C %K?",
    "Which image has more %C shapes, image %N or image %N?",
};

typedef struct { int n; int nums[2]; } numbers;

static int word_at(const char *q, const char *w) {
    size_t n = strlen(w);
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)q[i]) != w[i]) return 0;
    return (int)n;
}

/* Whether q matches pattern p to its end; image numbers go to *nums. Recursive, backtracking over
 * the word lists (an "a" that is the start of "an"). */
static int match(const char *p, const char *q, numbers *nums) {
    for (;;) {
        if (*p == '\0') {
            while (isspace((unsigned char)*q)) q++;
            return *q == '\0';
        }
        if (p[0] == '%' && p[1] == 'N') {
            if (!isdigit((unsigned char)*q) || nums->n == 2) return 0;
            int v = 0;
            while (isdigit((unsigned char)*q) && v < 1000) v = v * 10 + (*q++ - '0');
            nums->nums[nums->n++] = v;
            p += 2;
            continue;
        }
        if (p[0] == '%' && (p[1] == 'K' || p[1] == 'C' || p[1] == 'A')) {
            const char *const *list = p[1] == 'K' ? kinds : p[1] == 'C' ? colors : articles;
            for (int i = 0; list[i]; i++) {
                int n = word_at(q, list[i]);
                numbers saved = *nums;
                if (n && match(p + 2, q + n, nums)) return 1;
                *nums = saved;
            }
            return 0;
        }
        if (*p == ' ') {   /* one or more spaces */
            if (!isspace((unsigned char)*q)) return 0;
            while (isspace((unsigned char)*q)) q++;
            p++;
            continue;
        }
        if (tolower((unsigned char)*p) != tolower((unsigned char)*q)) return 0;
        p++;
        q++;
    }
}

int oc_tool_demo_question_check(const char *question, int n_images, char *why, size_t why_bytes) {
    if (n_images < 1) {
        snprintf(why, why_bytes, "the demo model answers questions about pictures: give one with -i");
        return 0;
    }
    if (n_images > DEMO_MAX_IMAGES) {
        snprintf(why, why_bytes, "the demo model was trained on 1-%d pictures per question, not %d",
                 DEMO_MAX_IMAGES, n_images);
        return 0;
    }
    for (size_t t = 0; t < sizeof templates / sizeof templates[0]; t++) {
        numbers nums = { 0, { 0, 0 } };
        if (!match(templates[t], question ? question : "", &nums)) continue;
        for (int i = 0; i < nums.n; i++)
            if (nums.nums[i] < 1 || nums.nums[i] > n_images) {
                snprintf(why, why_bytes, "the question names image %d, but %d picture%s given",
                         nums.nums[i], n_images, n_images == 1 ? " was" : "s were");
                return 0;
            }
        return 1;
    }
    snprintf(why, why_bytes,
             "the demo model knows only its training questions, e.g. \"What color is the circle in "
             "image 1?\" (a colour, a count, a position, which image, a comparison: docs/usage.md)");
    return 0;
}

int oc_tool_demo_image_check(const char *path, char *why, size_t why_bytes) {
    oc_image_limits lim;
    oc_image_limits_default(&lim);
    lim.max_pixels = (int64_t)DEMO_SIDE_PX * DEMO_SIDE_PX;   /* a larger picture fails to load: outside */
    oc_image img;
    oc_error err;
    oc_status st = oc_image_load(&img, path, &lim, NULL, &err);
    if (st == OC_ERR_RANGE) {
        snprintf(why, why_bytes, "%s is larger than the 112 x 112 px synthetic scenes the demo model was "
                 "trained on", path);
        return 0;
    }
    if (st != OC_OK) return 1;   /* unreadable: oc_ask reports it */
    int ok = img.width_px == DEMO_SIDE_PX && img.height_px == DEMO_SIDE_PX;
    if (!ok)
        snprintf(why, why_bytes, "%s is %d x %d px; the demo model was trained on 112 x 112 px synthetic scenes",
                 path, (int)img.width_px, (int)img.height_px);
    oc_image_free(&img);
    return ok;
}
