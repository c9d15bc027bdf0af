#include "intern.h"
#include "strmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Strings are carved from chunks of this size (no malloc header each). */
#define CHUNK 16384

/* One pool: at most max strings, in a table of twice as many slots (a probe always meets a hole). */
struct pool {
	pthread_mutex_t lock;
	int max;
	const char **slots;   /* 2 * max entries, NULL where empty */
	int count;
	char *chunk;          /* the chunk being carved; earlier ones are reachable from slots */
	size_t chunk_left;
};

static struct pool devices = { PTHREAD_MUTEX_INITIALIZER, INTERN_MAX_STRINGS, NULL, 0, NULL, 0 };
static struct pool labels = { PTHREAD_MUTEX_INITIALIZER, INTERN_MAX_LABELS, NULL, 0, NULL, 0 };

static char *carve(struct pool *p, size_t n)
{
	if (n > p->chunk_left) {
		p->chunk = malloc(CHUNK);
		if (!p->chunk) {
			p->chunk_left = 0;
			return NULL;
		}
		p->chunk_left = CHUNK;
	}
	char *at = p->chunk;
	p->chunk += n;
	p->chunk_left -= n;
	return at;
}

static const char *intern_in(struct pool *p, const char *s)
{
	if (!s || !*s)
		return "";
	size_t len = strlen(s);
	if (len > INTERN_MAX_LEN)
		return NULL;
	const char *found = NULL;
	size_t nslots = 2 * (size_t)p->max;
	pthread_mutex_lock(&p->lock);
	if (!p->slots)
		p->slots = calloc(nslots, sizeof(*p->slots));
	if (p->slots) {
		size_t i = strmap_hash(s) % nslots;
		while (p->slots[i] && strcmp(p->slots[i], s))
			i = (i + 1) % nslots;
		if (p->slots[i]) {
			found = p->slots[i];
		} else if (p->count < p->max) {
			char *copy = carve(p, len + 1);
			if (copy) {
				memcpy(copy, s, len + 1);
				p->slots[i] = found = copy;
				p->count++;
			}
		}
	}
	pthread_mutex_unlock(&p->lock);
	return found;
}

const char *intern(const char *s)
{
	return intern_in(&devices, s);
}

const char *intern_label(const char *s)
{
	return intern_in(&labels, s);
}
