/*
 * clock: the times the daemons read. Monotonic milliseconds for deadlines
 * and intervals (immune to clock changes), wall-clock seconds for what is
 * written into API objects, and an absolute CLOCK_REALTIME instant for
 * pthread_cond_timedwait, which takes only that.
 *
 * A deterministic simulation replaces the first three with a virtual clock
 * (clock_virtual_set): time then moves only when the simulator says so, and
 * a seed replays exactly. Production code never sets it.
 */
#ifndef GPU_CLOCK_H
#define GPU_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in milliseconds. */
int64_t clock_mono_ms(void);
/* CLOCK_MONOTONIC in nanoseconds, for spans under a millisecond. */
int64_t clock_mono_ns(void);
/* Wall-clock (CLOCK_REALTIME) whole seconds since the epoch, as time(NULL). */
int64_t clock_wall_s(void);
/* clock_wall_s() as RFC 3339 in UTC, "2026-11-29T01:02:03Z", the times written into API objects. */
void clock_wall_rfc3339(char *out, size_t size);
/*
 * Makes the clock virtual: from now on clock_mono_ns() is mono_ns and
 * clock_wall_s() is wall_s (call again to move time; each replica of a
 * simulation may be given its own skew before it runs). clock_real()
 * returns to the system clocks. Simulations that run one thread at a time only.
 */
void clock_virtual_set(int64_t mono_ns, int64_t wall_s);
void clock_real(void);
/*
 * Under a virtual clock a thread never sleeps or blocks on a condition on
 * its own: the simulation decides when it goes on. yield is called where it
 * would have (with no lock of the caller's held): it returns when the
 * simulation lets the thread run again. NULL: return at once.
 */
void clock_virtual_hook(void (*yield)(void *ctx), void *ctx);
/* Sleeps us microseconds; under a virtual clock, the simulation's yield instead. */
void clock_sleep_us(int64_t us);
/*
 * pthread_cond_wait(c, m). Under a virtual clock: m let go, the
 * simulation's yield, m taken again, as a spurious wake-up (every caller
 * waits in a loop that checks its condition).
 */
void clock_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
/* The CLOCK_REALTIME instant ms milliseconds from now (ms >= 0), for pthread_cond_timedwait. */
struct timespec clock_deadline_ms(int64_t ms);

#endif
