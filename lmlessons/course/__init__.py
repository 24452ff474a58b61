"""What the lessons run on: the course corpus and tokenizer, tiny models, batches, the training
loop, the shipped checkpoints, the 2-process demo, the peak-memory measurement, the real
``Trainer`` step, the palette, lesson 10's chat template and the throughput measurement. Built on
the core; the core never imports it. Lesson 08's bug zoo is the next layer,
:mod:`lmlessons.bugzoo`, built on this one: nothing here imports it."""
