/* Background work's CPU priority: compiles that the program does not wait
 * for (a tiered trace's, speculation's) run below the threads that run
 * the program, so that on a machine with few cores the steps they would
 * speed up are not slowed down by them. */
#ifndef LOOM_CORE_PRIORITY_H
#define LOOM_CORE_PRIORITY_H

/* Lowers the calling thread's priority (nice +10), and with it that of
 * the processes it starts from now on (the C compiler). Linux keeps a
 * nice value per thread; elsewhere nothing changes. Best effort: a
 * refusal is ignored. */
void core_thread_background(void);

#endif
