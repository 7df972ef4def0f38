#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

/* Formats aside first: a caller adding context may pass the last
 * message itself as an argument. */
static loom_status_t record(loom_status_t status, const char *fmt, va_list ap) {
  char msg[sizeof last_error];
  vsnprintf(msg, sizeof msg, fmt ? fmt : "(no message)", ap);
  memcpy(last_error, msg, sizeof msg);
  return status;
}

loom_status_t loom_fail(loom_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(status, fmt, ap);
  va_end(ap);
  return status;
}

loom_status_t loom_set_error(loom_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(status, fmt, ap);
  va_end(ap);
  return status;
}

void loom_clear_error(void) { last_error[0] = '\0'; }

const char *loom_last_error(void) { return last_error; }

const char *loom_status_name(loom_status_t status) {
  static const char *const names[] = {
      [LOOM_OK] = "LOOM_OK",
      [LOOM_ERR_INVALID] = "LOOM_ERR_INVALID",
      [LOOM_ERR_SHAPE] = "LOOM_ERR_SHAPE",
      [LOOM_ERR_DTYPE] = "LOOM_ERR_DTYPE",
      [LOOM_ERR_AXIS] = "LOOM_ERR_AXIS",
      [LOOM_ERR_GRAPH] = "LOOM_ERR_GRAPH",
      [LOOM_ERR_BINDING] = "LOOM_ERR_BINDING",
      [LOOM_ERR_NOMEM] = "LOOM_ERR_NOMEM",
      [LOOM_ERR_IO] = "LOOM_ERR_IO",
      [LOOM_ERR_FORMAT] = "LOOM_ERR_FORMAT",
      [LOOM_ERR_VALUE] = "LOOM_ERR_VALUE",
      [LOOM_ERR_UNSUPPORTED] = "LOOM_ERR_UNSUPPORTED",
      [LOOM_ERR_COMM] = "LOOM_ERR_COMM",
  };
  if ((unsigned)status >= sizeof names / sizeof names[0]) return "LOOM_ERR_?";
  return names[status];
}
