/* Status values and the thread-local error message. */
#ifndef LOOM_CORE_STATUS_H
#define LOOM_CORE_STATUS_H

#include "loom/loom.h"

/* Records a formatted message as this thread's last error; returns status.
 * Inside Loom; code outside calls the public loom_set_error, the same. */
loom_status_t loom_fail(loom_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears the last error (at the start of a public call that succeeded). */
void loom_clear_error(void);

/* Returns from the calling function if expr fails. */
#define LOOM_TRY(expr)                                                        \
  do {                                                                        \
    loom_status_t try_status_ = (expr);                                       \
    if (try_status_ != LOOM_OK) return try_status_;                           \
  } while (0)

/* A failure for a null argument, naming it and the function. */
#define LOOM_CHECK_ARG(arg)                                                   \
  do {                                                                        \
    if (!(arg))                                                               \
      return loom_fail(LOOM_ERR_INVALID, "%s: argument '%s' is null",         \
                       __func__, #arg);                                       \
  } while (0)

#endif
