"""Run by tests/launch/test_vllm_adapter.py in a process of its own: the LoRA adapter synced into vLLM on a CPU
(a colocated engine, or a server already running at SERVER_URL), against the PEFT policy itself.

python tests/launch/vllm_adapter_probe.py MODEL_DIR OUT_DIR [SERVER_URL]
Prints one JSON line: the log-probabilities of a fixed text's tokens served by vLLM after each sync and
computed by the PEFT model in the training process, before and after the adapter's B matrices move (and
after one real optimizer step); the bytes each sync sent and the adapters vLLM holds.
"""

import json
import sys


def main(model_path: str, out: str, server: str | None = None) -> dict:
    import torch
    from vllm import SamplingParams
    from vllm.lora.punica_wrapper import punica_cpu
    from vllm_sync_probe import adapter_sync_trainer  # beside this file: the same trainer setting

    where = {"vllm_mode": "server", "vllm_server_base_url": server} if server else {}
    trainer = adapter_sync_trainer(model_path, out, **where)
    generation = trainer.vllm_generation
    scoring = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    text = "Calculate 2 + 2. The answer is 4."

    def served() -> tuple[list[int], list[float]]:
        generation.sync_weights()
        if server:
            return served_by_server()
        output = generation.llm.generate(
            [text], scoring, use_tqdm=False, lora_request=generation._lora_request
        )[0]
        ids = output.prompt_token_ids
        return ids, [
            step[token].logprob for token, step in zip(ids[1:], output.prompt_logprobs[1:], strict=True)
        ]

    def served_by_server() -> tuple[list[int], list[float]]:
        # The text echoed with its tokens' log-probabilities, from the model the client now names (the adapter).
        client = generation.vllm_client
        body = {"model": client.model, "prompt": text, "max_tokens": 1, "temperature": 0.0, "echo": True}
        body.update(logprobs=0, return_tokens_as_token_ids=True)
        answer = client.session.post(f"{server}/v1/completions", json=body).json()
        count = answer["usage"]["prompt_tokens"]
        logprobs = answer["choices"][0]["logprobs"]
        ids = [int(token.removeprefix("token_id:")) for token in logprobs["tokens"][:count]]
        return ids, logprobs["token_logprobs"][1:count]

    def policy(ids: list[int]) -> list[float]:
        with torch.no_grad():
            logits = trainer.model(torch.tensor([ids])).logits[0, :-1].float()
        logprobs = torch.log_softmax(logits, -1)
        return [logprobs[i, token].item() for i, token in enumerate(ids[1:])]

    ids, original = served()
    result = {
        "generation": type(generation).__name__,
        "fallback": generation.adapter_sync_fallback,
        "lora_op": f"{punica_cpu.bgmv_shrink.__module__}.{punica_cpu.bgmv_shrink.__name__}",
        "original": original,
        "original_policy": policy(ids),
    }
    # The B matrices start at zero: moving them is what changes the policy.
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param) * 0.5)
    _, result["perturbed"] = served()
    result["perturbed_policy"] = policy(ids)
    result["adapter_parameters"] = sum(p.numel() for n, p in trainer.model.named_parameters() if "lora_" in n)
    result["sync_bytes"] = generation.sync_bytes
    # One real step through the trainer: its own sync before generating, then the optimizer's update.
    trainer.train()
    _, result["trained"] = served()
    result["trained_policy"] = policy(ids)
    if server:  # what the server offers: its model, then the adapters it still holds by name
        listed = generation.vllm_client.session.get(f"{server}/v1/models").json()["data"]
        result["loras"] = [int(m["id"].removeprefix("policy-v")) for m in listed[1:]]
        result["model_named"] = generation.vllm_client.model
    else:
        result["loras"] = sorted(generation.llm.llm_engine.list_loras())
    result["version"] = generation._adapter_version
    return result


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])), flush=True)
