/*
 * The filter's back-pressure on binds that queue (src/extender/backlog.h):
 * the age of the oldest bind in flight, a wait bounded by the limit, a
 * wait that ends when the old bind is answered, answers without arrivals,
 * more binds in flight than the ring remembers; and through the verbs, a
 * GPU pod's filter held back while a bind has queued past the limit.
 */
#include "testutil.h"

#include "backlog.h"
#include "clock.h"

#include <pthread.h>
#include <unistd.h>

static void test_nothing_in_flight(void **state)
{
	(void)state;
	struct backlog b;
	backlog_init(&b);
	assert_int_equal(backlog_oldest_ms(&b), 0);
	assert_int_equal(backlog_wait(&b, 50), 0);
	backlog_answer(&b);                         /* an answer without an arrival counts nothing */
	backlog_arrive(&b);
	usleep(30 * 1000);
	assert_true(backlog_oldest_ms(&b) >= 25);   /* the arrival is still in flight */
	backlog_answer(&b);
	assert_int_equal(backlog_oldest_ms(&b), 0);
	backlog_destroy(&b);
}

static void test_wait_is_bounded(void **state)
{
	(void)state;
	struct backlog b;
	backlog_init(&b);
	backlog_arrive(&b);
	assert_int_equal(backlog_wait(&b, 50), 0);   /* young: no wait */
	usleep(80 * 1000);
	int64_t waited = backlog_wait(&b, 50);       /* old, never answered: the limit, no more */
	assert_true(waited >= 50 && waited < 500);
	assert_int_equal(backlog_wait(&b, 0), 0);    /* 0: off */
	backlog_answer(&b);
	backlog_destroy(&b);
}

struct answerer {
	struct backlog *b;
	int after_ms;
};

static void *answer_later(void *arg)
{
	struct answerer *a = arg;
	usleep((useconds_t)a->after_ms * 1000);
	backlog_answer(a->b);
	return NULL;
}

static void test_wait_ends_when_answered(void **state)
{
	(void)state;
	struct backlog b;
	backlog_init(&b);
	backlog_arrive(&b);
	usleep(300 * 1000);
	struct answerer a = { &b, 30 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, answer_later, &a), 0);
	int64_t waited = backlog_wait(&b, 250);
	pthread_join(t, NULL);
	assert_true(waited >= 25 && waited < 200);   /* ended by the answer, before the limit */
	backlog_destroy(&b);
}

static void test_more_than_the_ring(void **state)
{
	(void)state;
	struct backlog *b = malloc(sizeof(*b));
	backlog_init(b);
	backlog_arrive(b);
	usleep(40 * 1000);
	for (int i = 0; i < BACKLOG_RING + 10; i++)
		backlog_arrive(b);
	/* The first arrival is forgotten; the oldest remembered is young. */
	assert_true(backlog_oldest_ms(b) < 35);
	for (int i = 0; i < BACKLOG_RING + 11; i++)
		backlog_answer(b);
	assert_int_equal(backlog_oldest_ms(b), 0);
	backlog_destroy(b);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nothing_in_flight),
		cmocka_unit_test(test_wait_is_bounded),
		cmocka_unit_test(test_wait_ends_when_answered),
		cmocka_unit_test(test_more_than_the_ring),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
