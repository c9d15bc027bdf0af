/*
 * clock: the two times the daemons wait with. Monotonic milliseconds for
 * deadlines and intervals (immune to clock changes), and an absolute
 * CLOCK_REALTIME instant for pthread_cond_timedwait, which takes only that.
 */
#ifndef GPU_CLOCK_H
#define GPU_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in milliseconds. */
int64_t clock_mono_ms(void);
/* CLOCK_MONOTONIC in nanoseconds, for spans under a millisecond. */
int64_t clock_mono_ns(void);
/* The CLOCK_REALTIME instant ms milliseconds from now (ms >= 0), for pthread_cond_timedwait. */
struct timespec clock_deadline_ms(int64_t ms);

#endif
