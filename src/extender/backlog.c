/* The filter's back-pressure on binds that queue (backlog.h). */
#include "backlog.h"
#include "clock.h"

#include <string.h>

void backlog_init(struct backlog *b)
{
	memset(b, 0, sizeof(*b));
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->answered_one, NULL);
}

void backlog_destroy(struct backlog *b)
{
	pthread_cond_destroy(&b->answered_one);
	pthread_mutex_destroy(&b->lock);
}

void backlog_arrive(struct backlog *b)
{
	int64_t now = clock_mono_ms();
	pthread_mutex_lock(&b->lock);
	b->arrival_ms[b->arrived % BACKLOG_RING] = now;
	b->arrived++;
	pthread_mutex_unlock(&b->lock);
}

void backlog_answer(struct backlog *b)
{
	pthread_mutex_lock(&b->lock);
	if (b->answered < b->arrived)
		b->answered++;
	if (b->waiters)
		pthread_cond_broadcast(&b->answered_one);
	pthread_mutex_unlock(&b->lock);
}

/* Under the lock. */
static int64_t oldest_locked(const struct backlog *b, int64_t now)
{
	if (b->answered >= b->arrived)
		return 0;
	uint64_t first = b->arrived - b->answered > BACKLOG_RING ? b->arrived - BACKLOG_RING : b->answered;
	int64_t age = now - b->arrival_ms[first % BACKLOG_RING];
	return age > 0 ? age : 0;
}

int64_t backlog_oldest_ms(struct backlog *b)
{
	int64_t now = clock_mono_ms();
	pthread_mutex_lock(&b->lock);
	int64_t age = oldest_locked(b, now);
	pthread_mutex_unlock(&b->lock);
	return age;
}

int64_t backlog_wait(struct backlog *b, int64_t limit_ms)
{
	if (limit_ms <= 0)
		return 0;
	int64_t start = clock_mono_ms(), now = start;
	pthread_mutex_lock(&b->lock);
	b->waiters++;
	while (oldest_locked(b, now) > limit_ms && now - start < limit_ms) {
		struct timespec until = clock_deadline_ms(limit_ms - (now - start));
		pthread_cond_timedwait(&b->answered_one, &b->lock, &until);
		now = clock_mono_ms();
	}
	b->waiters--;
	pthread_mutex_unlock(&b->lock);
	return now - start;
}
