#include "slab.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#define CHUNK ((size_t)2 << 20)
#define UNIT 64
#define CLASSES (SLAB_MAX_BLOCK / UNIT)

struct chunk {
	struct chunk *next;
};

struct free_block {
	struct free_block *next;
};

struct slab {
	pthread_mutex_t lock;
	struct chunk *chunks;       /* every chunk, for slab_free */
	char *bump;                 /* the unused rest of the newest chunk */
	size_t left;
	struct free_block *free[CLASSES + 1];
};

static size_t class_of(size_t n)
{
	return (n + UNIT - 1) / UNIT;
}

struct slab *slab_new(void)
{
	struct slab *s = calloc(1, sizeof(*s));
	if (s)
		pthread_mutex_init(&s->lock, NULL);
	return s;
}

void slab_free(struct slab *s)
{
	if (!s)
		return;
	while (s->chunks) {
		struct chunk *c = s->chunks;
		s->chunks = c->next;
		free(c);
	}
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void *slab_alloc(struct slab *s, size_t n)
{
	size_t k = class_of(n);
	if (!n || k > CLASSES) {
		void *p = NULL;
		return posix_memalign(&p, UNIT, n ? n : 1) ? NULL : p;
	}
	pthread_mutex_lock(&s->lock);
	void *p = s->free[k];
	if (p) {
		s->free[k] = s->free[k]->next;
	} else {
		size_t size = k * UNIT;
		if (s->left < size) {
			struct chunk *c = aligned_alloc(CHUNK, CHUNK);
			if (!c) {
				pthread_mutex_unlock(&s->lock);
				return NULL;
			}
			madvise(c, CHUNK, MADV_HUGEPAGE);   /* a hint; fine if refused */
			c->next = s->chunks;
			s->chunks = c;
			s->bump = (char *)c + UNIT;         /* the first unit holds the link */
			s->left = CHUNK - UNIT;
		}
		p = s->bump;
		s->bump += size;
		s->left -= size;
	}
	pthread_mutex_unlock(&s->lock);
	return p;
}

void slab_release(struct slab *s, void *p, size_t n)
{
	if (!p)
		return;
	size_t k = class_of(n);
	if (!n || k > CLASSES) {
		free(p);
		return;
	}
	pthread_mutex_lock(&s->lock);
	struct free_block *b = p;
	b->next = s->free[k];
	s->free[k] = b;
	pthread_mutex_unlock(&s->lock);
}
