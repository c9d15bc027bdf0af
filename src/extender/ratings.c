/* The ratings a filter made, for the prioritize that follows it. */
#include "ratings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ratings_init(struct ratings *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
}

static void slot_clear(struct ratings_slot *s)
{
	free(s->view);
	free(s->raw);
	free(s->ok);
	memset(s, 0, sizeof(*s));
}

void ratings_release(struct ratings *r)
{
	for (int i = 0; i < RATINGS_SLOTS; i++)
		slot_clear(&r->slot[i]);
	pthread_mutex_destroy(&r->lock);
}

static struct ratings_slot *slot_of(struct ratings *r, const char *uid)
{
	for (int i = 0; i < RATINGS_SLOTS; i++)
		if (r->slot[i].view && !strcmp(r->slot[i].uid, uid))
			return &r->slot[i];
	return NULL;
}

void ratings_put(struct ratings *r, const struct ratings_key *k, uint32_t *view, double *raw, bool *ok, int n)
{
	struct ratings_slot s = { .policy = k->policy, .workload = k->workload, .n = n, .view = view, .raw = raw, .ok = ok };
	if (!view || !raw || !ok || !k->uid[0] || strlen(k->uid) >= sizeof(s.uid)) {
		slot_clear(&s);
		return;
	}
	snprintf(s.uid, sizeof(s.uid), "%s", k->uid);
	pthread_mutex_lock(&r->lock);
	struct ratings_slot *to = slot_of(r, k->uid);
	if (!to)
		to = &r->slot[r->next++ % RATINGS_SLOTS];
	struct ratings_slot old = *to;
	*to = s;
	pthread_mutex_unlock(&r->lock);
	slot_clear(&old);
}

int ratings_get(struct ratings *r, const struct ratings_key *k, const struct cache_node *const *view, int n,
		double *raw, bool *ok, bool *known)
{
	int filled = 0;
	pthread_mutex_lock(&r->lock);
	const struct ratings_slot *s = slot_of(r, k->uid);
	if (s && s->policy == k->policy && s->workload == k->workload) {
		/* The nodes come in the order the filter passed them: each at its place, or not known. */
		for (int i = 0; i < n && i < s->n; i++) {
			known[i] = view[i] && s->view[i] && view[i]->id == s->view[i];
			if (!known[i])
				continue;
			raw[i] = s->raw[i];
			ok[i] = s->ok[i];
			filled++;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return filled;
}
