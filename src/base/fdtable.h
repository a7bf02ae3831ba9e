/* fdtable.h - room in the process's descriptor table, made in one step.
 *
 * The kernel sizes a process's descriptor table to the highest descriptor
 * it has held, doubling it as descriptors are opened past its end. In a
 * process with more than one thread, each growth waits for an RCU grace
 * period: 5-12 ms measured on the 2-core machines this project runs on.
 * A runner opens four descriptors per worker as it starts (src/engine/
 * stop.h), past two or three such sizes at a concurrency of 64; reserving
 * their room at once costs one growth at most, and none at all when done
 * before the process has a second thread (as `leaserun worker` does). */
#ifndef LR_BASE_FDTABLE_H
#define LR_BASE_FDTABLE_H

/* Grows the table to hold n descriptors beyond the lowest free one, within
 * the soft RLIMIT_NOFILE; opens nothing that outlives the call. Best
 * effort: on any failure the table grows as descriptors come, as before. */
void lr_fd_table_reserve(int n);

#endif
