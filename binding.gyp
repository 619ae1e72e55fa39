{
  "variables": {
    "cuda_home%": "<!(node tools/build/cuda.mjs home)",
    "build_tests%": "<!(node tools/build/sources.mjs has-tests)"
  },
  "target_defaults": {
    "include_dirs": ["native"],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
    "cflags": ["-fPIC", "-fvisibility=hidden"],
    "cflags_cc+": ["-fvisibility-inlines-hidden"],
    "cflags_cc": ["-std=c++20", "-O3", "-fexceptions", "-Wall", "-Wextra", "-Wno-unused-parameter"]
  },
  "targets": [
    {
      "target_name": "bloomery_engine",
      "type": "static_library",
      "sources": ["<!@(node tools/build/sources.mjs engine <(target_arch))"],
      "conditions": [
        [
          "cuda_home!=''",
          {
            "sources": ["<!@(node tools/build/cuda.mjs sources)"],
            "defines": ["BLOOMERY_CUDA=1"],
            "direct_dependent_settings": { "defines": ["BLOOMERY_CUDA=1"] },
            "include_dirs": ["<(cuda_home)/include"],
            "link_settings": {
              "libraries": ["<(cuda_home)/lib64/libcudart_static.a", "-ldl", "-lrt", "-lpthread"]
            },
            "rules": [
              {
                "rule_name": "nvcc",
                "extension": "cu",
                "inputs": ["<(RULE_INPUT_PATH)", "<!@(node tools/build/cuda.mjs headers)"],
                "outputs": ["<(INTERMEDIATE_DIR)/<(RULE_INPUT_ROOT).cu.o"],
                "action": [
                  "<(cuda_home)/bin/nvcc",
                  "-std=c++20",
                  "-O3",
                  "--expt-relaxed-constexpr",
                  "-Xcompiler",
                  "-fPIC",
                  "-DBLOOMERY_CUDA=1",
                  "-Inative",
                  "<!@(node tools/build/cuda.mjs device-flags)",
                  "-c",
                  "<(RULE_INPUT_PATH)",
                  "-o",
                  "<@(_outputs)"
                ],
                "message": "nvcc <(RULE_INPUT_PATH)",
                "process_outputs_as_sources": 1
              }
            ]
          }
        ]
      ],
      "link_settings": { "libraries": ["-lpthread"] }
    },
    {
      "target_name": "bloomery",
      "dependencies": ["bloomery_engine"],
      "sources": ["<!@(node tools/build/sources.mjs addon)"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "ldflags": ["-Wl,--exclude-libs,ALL"]
    }
  ],
  "conditions": [
    [
      "build_tests==1",
      {
        "targets": [
          {
            "target_name": "native_tests",
            "type": "executable",
            "dependencies": ["bloomery_engine"],
            "sources": ["<!@(node tools/build/sources.mjs tests <(target_arch))"]
          }
        ]
      }
    ]
  ]
}
