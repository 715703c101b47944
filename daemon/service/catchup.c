/* The search index's catch-up (see catchup.h). */
#include "catchup.h"

#define SLICE_NS (250 * 1000)

static void idle_cb(uv_idle_t *h)
{
	struct catchup *cu = h->data;

	if (index_catch_up(cu->ix, SLICE_NS) == 0)
		uv_idle_stop(h);
}

static void pending_cb(void *ctx)
{
	struct catchup *cu = ctx;

	if (cu->started)
		uv_idle_start(&cu->idle, idle_cb);
}

int catchup_start(struct catchup *cu, uv_loop_t *loop, struct index *ix)
{
	int rc = uv_idle_init(loop, &cu->idle);

	if (rc < 0)
		return rc;
	cu->idle.data = cu;
	uv_unref((uv_handle_t *)&cu->idle); /* never keeps the loop up */
	cu->ix = ix;
	cu->started = true;
	ix->on_pending = pending_cb;
	ix->on_pending_ctx = cu;
	if (ix->pending.n)
		pending_cb(cu);
	return 0;
}

void catchup_stop(struct catchup *cu)
{
	if (!cu->started)
		return;
	cu->started = false;
	cu->ix->on_pending = NULL;
	uv_idle_stop(&cu->idle);
}
