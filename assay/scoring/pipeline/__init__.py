"""The scoring pipeline's state machine, on the store alone (no Celery here).

Every step is safe to run twice or never:
- components are *claimed* under a lease before any slow or paid work; a redelivered task finds the
  component landed (nothing to do) or leased (back off);
- a component *lands* once (``WHERE status NOT IN landed``); only the first landing bumps the score's
  completion count, and the landing that completes a score finalizes it in the same transaction;
  after that commit, a batch with no active score left is completed;
- the reconciler re-enqueues what a lost message left behind, leaves deferred work alone, and
  completes a batch whose completion check a crash cut off.

The modules, in the order work flows through them: ``components`` (references, queues),
``planning``, ``carry_over``, ``claims`` (leases, deferral, spend), ``budgets``, ``landing``,
``finalize`` (totals, pass blockers, finalize hooks), ``completion`` (batch completion, its hooks),
``summaries``, ``reconcile``; ``scorer`` computes one component.
"""
