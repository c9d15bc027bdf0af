#include "jsonarena.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define CHUNK_MIN (256u << 10)

struct jsonarena_chunk {
	struct jsonarena_chunk *next;
	size_t size, used;
	_Alignas(16) unsigned char data[];
};

static _Thread_local struct jsonarena *current;

static bool owns(const struct jsonarena *a, const void *p)
{
	for (const struct jsonarena_chunk *c = a->chunks; c; c = c->next)
		if ((const unsigned char *)p >= c->data && (const unsigned char *)p < c->data + c->size)
			return true;
	return false;
}

static void *arena_malloc(size_t n)
{
	struct jsonarena *a = current;
	if (!a)
		return malloc(n);
	n = (n + 15) & ~(size_t)15;
	struct jsonarena_chunk *c = a->chunks;
	if (!c || c->size - c->used < n) {
		size_t size = n > CHUNK_MIN ? n : CHUNK_MIN;
		if (a->bytes + size > a->cap)
			return NULL;
		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->size = size;
		c->used = 0;
		c->next = a->chunks;
		a->chunks = c;
		a->bytes += size;
	}
	void *p = c->data + c->used;
	c->used += n;
	return p;
}

static void arena_free(void *p)
{
	/* Blocks of the arena go with it at jsonarena_end(). */
	if (p && !(current && owns(current, p)))
		free(p);
}

void jsonarena_install(void)
{
	cJSON_Hooks hooks = { arena_malloc, arena_free };
	cJSON_InitHooks(&hooks);
}

void jsonarena_begin(struct jsonarena *a, size_t cap)
{
	a->chunks = NULL;
	a->bytes = 0;
	a->cap = cap;
	current = a;
}

void jsonarena_delete(cJSON *tree)
{
	if (tree && !(current && owns(current, tree)))
		cJSON_Delete(tree);
}

void jsonarena_end(struct jsonarena *a)
{
	if (current == a)
		current = NULL;
	while (a->chunks) {
		struct jsonarena_chunk *c = a->chunks;
		a->chunks = c->next;
		free(c);
	}
	a->bytes = 0;
}
