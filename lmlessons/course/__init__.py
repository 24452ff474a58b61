"""What the lessons run on: the course corpus and tokenizer, tiny models, batches, the training
loop, the shipped checkpoints, the 2-process demo, the peak-memory measurement, the real
``Trainer`` step, the palette, the one reader of the prose in ``data/content/``, lesson 10's chat
template, the throughput measurement, and Part III's preference set (lesson 11) and GRPO prompts,
rewards and runs (lesson 12). Built on the core; the core never imports it. Lesson 08's bug zoo
is the next layer, :mod:`lmlessons.bugzoo`, built on this one: nothing here imports it."""
