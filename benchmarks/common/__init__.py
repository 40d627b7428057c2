"""What the benchmark scripts share; nothing here is run on its own.

  cli          the shape arguments, the machine line and the closing table of the speed scripts
  synthetic    a pretraining config at a given shape and random batches of its layout
  step_timing  the pretraining train step timed (and its MFU) beside Hugging Face's
  finetuning   the imported MiniLM-L6, the SST-2 / CoNLL-2003 slices, a whole fine-tuning run
  squad_cloze  SQuAD-format cloze questions over paragraphs of real text
"""
