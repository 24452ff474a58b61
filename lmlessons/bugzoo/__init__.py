"""The bug zoo of lesson 08: real training runs beside a healthy run (most with one bug, one with
a too-high learning rate, one with no bug at all). Its own layer, on top of the course.

* :mod:`~lmlessons.bugzoo.bugs`: each bug beside its fix, as small functions of one job
  each (mask a batch, the MLM loss, a causal-LM batch, the decoder, the NSP negatives, gradient
  accumulation, the ``Trainer``, the labels and the batches of chat fine-tuning, the preference
  batch and the reference log-probs of DPO, the losses of a mixture of experts and their
  accumulation, the loss of a multi-token model);
* :mod:`~lmlessons.bugzoo.data`: the sentence batches, conversations and preference pairs the
  runs read, and the bug zoo's prose and tables (``lmlessons/data/content/bugzoo.toml``);
* :mod:`~lmlessons.bugzoo.loops`: the training loops, the course's and the ``Trainer``;
* :mod:`~lmlessons.bugzoo.runs`: the runs (``RUNS``) and ``run``, which trains one;
* :mod:`~lmlessons.bugzoo.symptoms`: what is measured on a trained model;
* :mod:`~lmlessons.bugzoo.instruments`: the columns of the symptom table, a run's sign on each;
* :mod:`~lmlessons.bugzoo.records`: the recorded runs shipped in ``lmlessons/data/bugzoo``
  (``python -m tools.bugzoo`` records them anew) and their summaries;
* :mod:`~lmlessons.bugzoo.cases`: the cases a learner diagnoses, in groups by the lessons they
  need, and the diagnoses to choose from.

The diagnosis widget is :func:`lmlessons.widgets.bugzoo.bug_zoo_widget`, the checker
``check("bug_zoo", {...})`` (:mod:`lmlessons.exercises.check_bugzoo`).
"""
