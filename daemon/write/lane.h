/*
 * A lane: one thread of its own that runs jobs in submission order, each
 * job's completion then running on the loop thread. For work that must
 * never queue behind the shared libuv thread pool's slower jobs (file
 * writes, syncs of the whole file system, git commits): the write-ahead
 * log's appends, on which every acknowledgement waits.
 */
#ifndef VMEM_DAEMON_LANE_H
#define VMEM_DAEMON_LANE_H

#include <stdbool.h>
#include <uv.h>

struct lane_job;

typedef void (*lane_fn)(struct lane_job *job);

/* Embedded in its owner, which must stay alive until after ran. */
struct lane_job {
	lane_fn work;  /* on the lane's thread */
	lane_fn after; /* then on the loop thread */
	struct lane_job *next;
	bool started; /* the thread took it (under the lane's mutex) */
};

struct lane {
	uv_thread_t thread;
	uv_mutex_t mu;
	uv_cond_t cv;
	uv_async_t done; /* wakes the loop for finished jobs */
	struct lane_job *queue, *queue_tail;
	struct lane_job *finished, *finished_tail;
	bool stop;
	bool running;
};

/* Start the thread. 0 or a negative libuv error. */
int lane_init(struct lane *l, uv_loop_t *loop);

/* Queue a job with its work and after set. */
void lane_submit(struct lane *l, struct lane_job *job);

/*
 * Change a queued job before the thread takes it: fn(job, arg) runs
 * under the lane's mutex if job has not started, and true is returned;
 * false (fn not called) once the thread has it. So a job can keep
 * gathering work while the one before it runs, and the thread goes on
 * to it without waiting for the loop.
 */
bool lane_amend(struct lane *l, struct lane_job *job,
		void (*fn)(struct lane_job *job, void *arg), void *arg);

/* Run what is queued, join the thread and close the handle; the after
 * callbacks of jobs that finished meanwhile run here. */
void lane_close(struct lane *l);

#endif
