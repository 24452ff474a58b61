"""The bug zoo of lesson 08: real training runs beside a healthy run (most with one bug, one with
a too-high learning rate, one with no bug at all).

* :mod:`~lmlessons.course.bugzoo.bugs`: each bug beside its fix, as small functions of one job
  each (mask a batch, the MLM loss, a causal-LM batch, the decoder, the NSP negatives, gradient
  accumulation, the ``Trainer``, the labels and the batches of chat fine-tuning);
* :mod:`~lmlessons.course.bugzoo.data`: the sentence batches and the conversations the runs read;
* :mod:`~lmlessons.course.bugzoo.loops`: the training loops, the course's and the ``Trainer``;
* :mod:`~lmlessons.course.bugzoo.runs`: the runs (``RUNS``) and ``run``, which trains one;
* :mod:`~lmlessons.course.bugzoo.symptoms`: what is measured on a trained model;
* :mod:`~lmlessons.course.bugzoo.instruments`: the instruments (the columns of the symptom
  table) and the sign of a run against its healthy run on each;
* :mod:`~lmlessons.course.bugzoo.records`: the recorded runs shipped in
  ``lmlessons/data/bugzoo`` (``python -m tools.bugzoo`` records them anew) and their summaries;
* :mod:`~lmlessons.course.bugzoo.cases`: the cases a learner diagnoses and the diagnoses to
  choose from.

The diagnosis widget is :func:`lmlessons.widgets.bugzoo.bug_zoo_widget`, the checker
``check("bug_zoo", {...})`` (:mod:`lmlessons.exercises.check_bugzoo`).
"""
