"""What crosses a boundary: the messages (base.py says how api, jobs, task_records, answers
and export divide them), their validation and errors, times, metadata, policies, scopes, ids."""
