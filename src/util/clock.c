/* Monotonic and wall-clock readings, condition-variable deadlines, and the virtual clock of simulations. */
#include "clock.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Set only by a simulation (one thread); production reads false and never the two values. */
static atomic_bool virtual_on;
static _Atomic int64_t virtual_mono_ns, virtual_wall_s;

void clock_virtual_set(int64_t mono_ns, int64_t wall_s)
{
	atomic_store(&virtual_mono_ns, mono_ns);
	atomic_store(&virtual_wall_s, wall_s);
	atomic_store(&virtual_on, true);
}

void clock_real(void)
{
	atomic_store(&virtual_on, false);
}

static void (*_Atomic virtual_yield)(void *ctx);
static void *_Atomic virtual_yield_ctx;

void clock_virtual_hook(void (*yield)(void *ctx), void *ctx)
{
	atomic_store(&virtual_yield_ctx, ctx);
	atomic_store(&virtual_yield, yield);
}

static void yield_now(void)
{
	void (*yield)(void *) = atomic_load(&virtual_yield);
	if (yield)
		yield(atomic_load(&virtual_yield_ctx));
	else
		sched_yield();
}

void clock_sleep_us(int64_t us)
{
	if (atomic_load_explicit(&virtual_on, memory_order_relaxed)) {
		yield_now();
		return;
	}
	struct timespec t = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
	while (nanosleep(&t, &t))
		;
}

void clock_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	if (!atomic_load_explicit(&virtual_on, memory_order_relaxed)) {
		pthread_cond_wait(c, m);
		return;
	}
	pthread_mutex_unlock(m);
	yield_now();
	pthread_mutex_lock(m);
}

int64_t clock_mono_ns(void)
{
	if (atomic_load_explicit(&virtual_on, memory_order_relaxed))
		return atomic_load(&virtual_mono_ns);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t clock_mono_ms(void)
{
	return clock_mono_ns() / 1000000;
}

int64_t clock_wall_s(void)
{
	if (atomic_load_explicit(&virtual_on, memory_order_relaxed))
		return atomic_load(&virtual_wall_s);
	return (int64_t)time(NULL);
}

void clock_wall_rfc3339(char *out, size_t size)
{
	time_t now = (time_t)clock_wall_s();
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

struct timespec clock_deadline_ms(int64_t ms)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += (time_t)(ms / 1000);
	t.tv_nsec += (long)(ms % 1000) * 1000000;
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	return t;
}
