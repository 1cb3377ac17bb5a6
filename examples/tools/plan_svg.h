/* plan_svg.h: an attention plan drawn as SVG (plan_svg.c), for `ocellus plan show FILE --svg OUT`. */
#ifndef OC_PLAN_SVG_H
#define OC_PLAN_SVG_H

#include "plan/plan.h"

#include <stdio.h>

/* Writes the picture to f with title on top. Returns 0, or -1 when f reported an error. */
int oc_plan_svg_write(const oc_plan *plan, const char *title, FILE *f);

#endif
