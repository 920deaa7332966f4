# A Hugging Face Trainer subclass overriding training_step under fp16 TrainingArguments: the
# Trainer steps through its loss scaler after training_step returns, so the backward must be
# `self.accelerator.backward(loss)`, which scales the loss; a plain `loss.backward()` is
# divided by the scale at the step.
import argparse

from transformers import Trainer, TrainingArguments


class DistillationTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        loss = outputs.loss + 0.5 * self.distillation_loss(outputs, inputs)
        return (loss, outputs) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        model.train()
        inputs = self._prepare_inputs(inputs)
        with self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        if self.args.n_gpu > 1:
            loss = loss.mean()
        loss.backward()
        return loss.detach() / self.args.gradient_accumulation_steps


class RightTrainer(Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        model.train()
        loss = self.compute_loss(model, self._prepare_inputs(inputs))
        self.accelerator.backward(loss)
        return loss.detach()


class CopiedOldTrainer(Trainer):
    # transformers 4.2x's own training_step: the plain backward is the branch without scaling.
    def training_step(self, model, inputs):
        loss = self.compute_loss(model, self._prepare_inputs(inputs))
        if self.do_grad_scaling:
            self.scaler.scale(loss).backward()
        elif self.use_apex:
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        return loss.detach()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    training_args = TrainingArguments(output_dir="out", fp16=args.fp16, max_grad_norm=1.0)
    trainer = DistillationTrainer(model=build_model(), args=training_args, train_dataset=load())
    trainer.train()
