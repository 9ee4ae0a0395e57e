"""Makes what llama-recipes' fine-tuning reads, offline, for a recording of
what the program prints (scripts/gpu-evidence/llama-recipes.sh):

  MODEL/   a Llama of random weights, small enough for one GPU in seconds
           (4 layers, hidden 256), with a SentencePiece tokenizer trained
           here, saved as Hugging Face saves Llama 2 7B (config.json,
           safetensors, tokenizer.model): what --model_name points at;
  DATA     an Alpaca-format JSON (instruction, input, output), the format of
           llama-recipes' alpaca_dataset: 200 records (its validation split)
           then the training records; sums of two numbers, so the loss
           falls over a few epochs.

Usage: python3 make_tiny_llama.py MODEL DATA [RECORDS]
"""

import json
import os
import random
import sys

import sentencepiece as spm
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def records(n):
    rng = random.Random(7)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        out.append(
            {
                "instruction": "Add the two numbers.",
                "input": f"{a} and {b}",
                "output": f"The sum of {a} and {b} is {a + b}.",
            }
        )
    return out


def main():
    model_dir, data_path = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2400
    os.makedirs(model_dir, exist_ok=True)
    data = records(n)
    with open(data_path, "w") as f:
        json.dump(data, f)
    corpus = os.path.join(model_dir, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(
            "Below is an instruction that describes a task, paired with an input "
            "that provides further context. Write a response that appropriately "
            "completes the request.\n### Instruction:\n### Input:\n### Response:\n"
        )
        for r in data:
            f.write(f"{r['instruction']}\n{r['input']}\n{r['output']}\n")
    spm.SentencePieceTrainer.train(
        input=corpus,
        model_prefix=os.path.join(model_dir, "tokenizer"),
        vocab_size=512,
        model_type="bpe",
        bos_id=1,
        eos_id=2,
        unk_id=0,
        pad_id=-1,
        byte_fallback=True,
    )
    os.remove(corpus)
    os.remove(os.path.join(model_dir, "tokenizer.vocab"))
    try:
        from transformers import LlamaTokenizer

        tok = LlamaTokenizer(vocab_file=os.path.join(model_dir, "tokenizer.model"))
    except Exception as e:  # transformers without the slow tokenizer
        print(f"LlamaTokenizer(vocab_file=...) failed: {e!r}; trying the fast one")
        from transformers import LlamaTokenizerFast

        tok = LlamaTokenizerFast(vocab_file=os.path.join(model_dir, "tokenizer.model"))
    tok.save_pretrained(model_dir)
    config = LlamaConfig(
        vocab_size=tok.vocab_size,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(model_dir)
    print(
        f"transformers {transformers.__version__}: model in {model_dir} "
        f"(vocab {tok.vocab_size}), {n} records in {data_path}"
    )


if __name__ == "__main__":
    main()
