# Trainer subclasses whose plain backward the Trainer does not scale: bf16 (no loss scaler),
# fp16 off, and TrainingArguments built elsewhere (unknown precision: never taken for fp16).
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer


class PlainTrainer(Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = self.compute_loss(model, self._prepare_inputs(inputs))
        loss.backward()
        return loss.detach()


class PlainSeq2SeqTrainer(Seq2SeqTrainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = self.compute_loss(model, self._prepare_inputs(inputs))
        loss.backward()
        return loss.detach()


bf16_args = Seq2SeqTrainingArguments(output_dir="out", bf16=True, predict_with_generate=True)
fp32_args = Seq2SeqTrainingArguments(output_dir="out", fp16=False)
