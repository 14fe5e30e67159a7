"""The queue and the task registry in Redis: enqueueing, capacity, task state, live workers."""
