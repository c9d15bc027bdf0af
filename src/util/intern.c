#include "intern.h"
#include "strmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Twice the bound: the table never fills, so a probe always meets a hole. */
#define SLOTS (2 * INTERN_MAX_STRINGS)
/* Strings are carved from chunks of this size (no malloc header each). */
#define CHUNK 16384

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char **slots;   /* SLOTS entries, NULL where empty */
static int count;
static char *chunk;          /* the chunk being carved; earlier ones are reachable from slots */
static size_t chunk_left;

static char *carve(size_t n)
{
	if (n > chunk_left) {
		chunk = malloc(CHUNK);
		if (!chunk) {
			chunk_left = 0;
			return NULL;
		}
		chunk_left = CHUNK;
	}
	char *p = chunk;
	chunk += n;
	chunk_left -= n;
	return p;
}

const char *intern(const char *s)
{
	if (!s || !*s)
		return "";
	size_t len = strlen(s);
	if (len > INTERN_MAX_LEN)
		return NULL;
	const char *found = NULL;
	pthread_mutex_lock(&lock);
	if (!slots)
		slots = calloc(SLOTS, sizeof(*slots));
	if (slots) {
		size_t i = strmap_hash(s) % SLOTS;
		while (slots[i] && strcmp(slots[i], s))
			i = (i + 1) % SLOTS;
		if (slots[i]) {
			found = slots[i];
		} else if (count < INTERN_MAX_STRINGS) {
			char *copy = carve(len + 1);
			if (copy) {
				memcpy(copy, s, len + 1);
				slots[i] = found = copy;
				count++;
			}
		}
	}
	pthread_mutex_unlock(&lock);
	return found;
}
