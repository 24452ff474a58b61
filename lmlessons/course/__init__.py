"""What the lessons run on: the course corpus and tokenizer, tiny models, batches, the training
loop, the shipped checkpoints, the 2-process demo and the peak-memory measurement. Built on the
core; the core never imports it."""
