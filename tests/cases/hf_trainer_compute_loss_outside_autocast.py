import torch
import torch.nn.functional as F
from transformers import Trainer, TrainingArguments


class OddsRatioTrainer(Trainer):
    # Since transformers 4.30 the Trainer autocasts the model's forward only (through
    # accelerate, which hands its outputs back in float32): the ops of `compute_loss` run
    # outside autocast, in the outputs' dtype.
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        chosen, rejected = model(**inputs)
        ratio = torch.log(F.sigmoid(chosen - rejected))
        return -ratio.mean()


def main(model, ds):
    args = TrainingArguments(output_dir="out", fp16=True)
    OddsRatioTrainer(model=model, args=args, train_dataset=ds).train()
