/* Background work's CPU priority (priority.h). */
#include "core/priority.h"

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

enum { BACKGROUND_NICE = 10 };

void core_thread_background(void) {
#ifdef __linux__
  /* PRIO_PROCESS with a thread id sets that thread's nice value alone */
  (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), BACKGROUND_NICE);
#endif
}
