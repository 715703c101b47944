/*
 * A lane (see lane.h): a mutex-protected queue in, a mutex-protected
 * list of finished jobs out, and a uv_async to hand those to the loop.
 */
#include "lane.h"

#include <pthread.h>

static void push(struct lane_job **head, struct lane_job **tail,
		 struct lane_job *job)
{
	job->next = NULL;
	if (*tail)
		(*tail)->next = job;
	else
		*head = job;
	*tail = job;
}

static void lane_main(void *arg)
{
	struct lane *l = arg;

	/* Its own name in /proc (top -H, strace -p by thread): the log's. */
	pthread_setname_np(pthread_self(), "vmemd-log");

	uv_mutex_lock(&l->mu);
	for (;;) {
		struct lane_job *job;

		while (!l->queue && !l->stop)
			uv_cond_wait(&l->cv, &l->mu);
		job = l->queue;
		if (!job)
			break; /* stopping, and nothing left */
		l->queue = job->next;
		if (!l->queue)
			l->queue_tail = NULL;
		job->started = true;
		uv_mutex_unlock(&l->mu);
		job->work(job);
		uv_mutex_lock(&l->mu);
		push(&l->finished, &l->finished_tail, job);
		uv_async_send(&l->done);
	}
	uv_mutex_unlock(&l->mu);
}

/* Run the after callbacks of the finished jobs, in order. */
static void run_finished(struct lane *l)
{
	struct lane_job *job;

	uv_mutex_lock(&l->mu);
	job = l->finished;
	l->finished = l->finished_tail = NULL;
	uv_mutex_unlock(&l->mu);
	while (job) {
		struct lane_job *next = job->next;

		job->after(job);
		job = next;
	}
}

static void done_cb(uv_async_t *h)
{
	run_finished(h->data);
}

int lane_init(struct lane *l, uv_loop_t *loop)
{
	int rc;

	l->queue = l->queue_tail = NULL;
	l->finished = l->finished_tail = NULL;
	l->stop = false;
	l->running = false;
	rc = uv_mutex_init(&l->mu);
	if (rc < 0)
		return rc;
	rc = uv_cond_init(&l->cv);
	if (rc < 0)
		goto fail_mutex;
	rc = uv_async_init(loop, &l->done, done_cb);
	if (rc < 0)
		goto fail_cond;
	l->done.data = l;
	rc = uv_thread_create(&l->thread, lane_main, l);
	if (rc < 0) {
		uv_close((uv_handle_t *)&l->done, NULL);
		goto fail_cond;
	}
	l->running = true;
	return 0;
fail_cond:
	uv_cond_destroy(&l->cv);
fail_mutex:
	uv_mutex_destroy(&l->mu);
	return rc;
}

void lane_submit(struct lane *l, struct lane_job *job)
{
	job->started = false;
	uv_mutex_lock(&l->mu);
	push(&l->queue, &l->queue_tail, job);
	uv_cond_signal(&l->cv);
	uv_mutex_unlock(&l->mu);
}

bool lane_amend(struct lane *l, struct lane_job *job,
		void (*fn)(struct lane_job *job, void *arg), void *arg)
{
	bool queued;

	uv_mutex_lock(&l->mu);
	queued = !job->started;
	if (queued)
		fn(job, arg);
	uv_mutex_unlock(&l->mu);
	return queued;
}

void lane_close(struct lane *l)
{
	if (!l->running)
		return;
	uv_mutex_lock(&l->mu);
	l->stop = true;
	uv_cond_signal(&l->cv);
	uv_mutex_unlock(&l->mu);
	uv_thread_join(&l->thread);
	l->running = false;
	run_finished(l);
	uv_close((uv_handle_t *)&l->done, NULL);
	uv_cond_destroy(&l->cv);
	uv_mutex_destroy(&l->mu);
}
