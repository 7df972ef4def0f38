/* A growing string for reports (printed graphs, fusion plans, explain):
 * appends formatted text, remembering an allocation failure instead of
 * reporting each one; core_text_take reports it once. */
#ifndef LOOM_CORE_TEXT_H
#define LOOM_CORE_TEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/loom.h"

typedef struct core_text {
  char *s;
  int64_t len, cap;
  bool failed;
} core_text_t;

void core_text_put(core_text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hands the string to *out (freed with core_free), or fails with
 * LOOM_ERR_NOMEM naming `what` if any append ran out of memory. */
loom_status_t core_text_take(core_text_t *t, const char *what, char **out);

#endif
