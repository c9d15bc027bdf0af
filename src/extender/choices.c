/* The nodes that filters chose alone, until their binds arrive (choices.h). */
#include "choices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int choices_init(struct choices *s, int cap)
{
	memset(s, 0, sizeof(*s));
	s->c = calloc((size_t)cap, sizeof(*s->c));
	if (!s->c)
		return -1;
	s->cap = cap;
	pthread_mutex_init(&s->lock, NULL);
	return 0;
}

void choices_release(struct choices *s)
{
	if (!s->c)
		return;
	pthread_mutex_destroy(&s->lock);
	free(s->c);
	s->c = NULL;
}

/* Index of the pod's choice, or -1. Under the lock; the table holds a few binds in flight. */
static int find(const struct choices *s, const char *uid)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->c[i].uid, uid))
			return i;
	return -1;
}

static void remove_at(struct choices *s, int i, struct choice *out)
{
	*out = s->c[i];
	s->c[i] = s->c[--s->n];
}

bool choices_put(struct choices *s, const char *uid, const char *node, int64_t until_ms)
{
	if (strlen(uid) >= sizeof(s->c->uid) || strlen(node) >= sizeof(s->c->node))
		return false;
	pthread_mutex_lock(&s->lock);
	bool ok = find(s, uid) < 0 && s->n < s->cap;
	if (ok) {
		struct choice *c = &s->c[s->n++];
		snprintf(c->uid, sizeof(c->uid), "%s", uid);
		snprintf(c->node, sizeof(c->node), "%s", node);
		c->until_ms = until_ms;
	}
	pthread_mutex_unlock(&s->lock);
	return ok;
}

bool choices_take(struct choices *s, const char *uid, struct choice *out)
{
	pthread_mutex_lock(&s->lock);
	int i = find(s, uid);
	if (i >= 0)
		remove_at(s, i, out);
	pthread_mutex_unlock(&s->lock);
	return i >= 0;
}

int choices_take_expired(struct choices *s, int64_t now_ms, struct choice *out, int max)
{
	int n = 0;
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->n && n < max;) {
		if (s->c[i].until_ms <= now_ms)
			remove_at(s, i, &out[n++]);   /* the last one moved to i: look at i again */
		else
			i++;
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}
