// main.c: the vktrain command line. Thin: it parses flags, calls libvktrain, prints what the
// library returns, and turns every failure into one line on stderr and a non-zero exit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "env.h"
#include "vktrain.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "vktrain %s: train neural networks with Vulkan compute on any GPU, or on the CPU\n"
        "\n"
        "usage: vktrain COMMAND [options]\n"
        "\n"
        "commands:\n"
        "  devices [--json] [--device SPEC]\n"
        "                          list every Vulkan device the loader sees (or those SPEC "
        "selects)\n"
        "  view FILE.json [--png OUT.png]  show a trace in a window, or render it to a PNG\n"
        "  train [options]         train a model (default assets/models/fashion_mlp.json) on\n"
        "                          Fashion-MNIST (or --data DIR, --data-npy X.npy,Y.npy,\n"
        "                          --data-text FILE[,FILE...])\n"
        "  eval --init CKPT [options]  test accuracy and loss of a checkpoint\n"
        "  model FILE [--json|--torch]  a model's layers, shapes, parameters and FLOPs, or\n"
        "                          the same model as a PyTorch expression\n"
        "  generate --init CKPT [--model FILE] [--prompt TEXT] [--tokens N (200)]\n"
        "                          [--temperature X (1)] [--top-k K] [--seed S]  text from a\n"
        "                          trained language model (input [T] ids, output [T, V])\n"
        "  plan [options]          memory each device needs under each strategy, and the one\n"
        "                          to use (--model, --device, --batch, --mem-limit, ...)\n"
        "  bench matmul [--sizes 256,512,1024,2048] [--reps N] [--device SPEC] [--json]\n"
        "                          [--form NN|NT|TN] [--baseline: the same sizes on the CPU\n"
        "                          with OpenBLAS sgemm, and the ratio vktrain/BLAS (median of\n"
        "                          --rounds N rounds, default 3, alternating)]; a size S\n"
        "                          is S x S x S, MxNxK a layer's shape (c[M,N], inner K)\n"
        "  bench train [--steps N] [--baseline] [train options: --model, --device,\n"
        "                          --strategy, --batch, --json, ...]  samples/s and the step\n"
        "                          split into matmul / other kernels / communication / host;\n"
        "                          --baseline: PyTorch CPU on the same model, and the ratio\n"
        "                          (median of --rounds N rounds, default 5, alternating)\n"
        "  bench suite [--device SPEC] [--quick] [--mem-limit SIZE] --out RESULTS.json\n"
        "                          one device's peak FMA, memory bandwidth, matmul and training\n"
        "                          throughput by batch size, as a JSON file to compare with\n"
        "                          other machines' (docs/COMPARING.md)\n"
        "  advise --model FILE --batch N [--results A.json ...] [--device-profile NAME ...]\n"
        "                          [--mem-limit SIZE] [--devices K]  which device and strategy\n"
        "                          (fits, samples/s measured or predicted (roofline), split)\n"
        "  compare A.json [B.json ...] [--png DIR] [--html FILE]  `bench suite` results side by\n"
        "                          side: tables, and pictures drawn by vktrain "
        "(docs/COMPARING.md)\n"
        "\n"
        "train / eval options:\n"
        "  --model FILE            model JSON (docs/MODEL_FORMAT.md)\n"
        "  --epochs N (3)  --batch N (128)  --max-steps N  --seed S (1)  --no-shuffle\n"
        "  --optimizer sgd|adamw   sgd: --lr (0.05) --momentum (0.9) --nesterov --weight-decay "
        "(0)\n"
        "                          adamw: --lr (0.001) --beta1 --beta2 --eps --weight-decay "
        "(0.01)\n"
        "  --clip X                clip the global gradient norm to X\n"
        "  --lr-schedule constant|cosine|step  the rate per step, as torch.optim.lr_scheduler:\n"
        "                          cosine: CosineAnnealingLR over the run's steps (--lr-min\n"
        "                          eta_min (0), --lr-total-steps T (the run's)); step: StepLR\n"
        "                          (--lr-step-size N, required; --lr-gamma G (0.1))\n"
        "  --warmup-steps W        first W steps linear from lr/(W+1) (LinearLR, SequentialLR)\n"
        "  --augment crop,flip|crop|flip  training batches of images [C, H, W]: random\n"
        "                          crops of the image padded with --augment-pad N (4) zeros,\n"
        "                          horizontal flips (torchvision's RandomCrop, RandomHorizontal-\n"
        "                          Flip), drawn from --seed, the epoch and the sample\n"
        "  --data-npy X.npy,Y.npy  NumPy arrays; X may be int32/int64 token ids [N, T], Y one\n"
        "                          label per sample [N] or one per position [N, T]\n"
        "  --data-text FILE[,FILE...]  text as bytes (files; a directory: its files, sorted)\n"
        "                          for a model with input [T], output [T, 256]; the last tenth\n"
        "                          validates; an epoch: training bytes / T random windows\n"
        "                          (default for such a model: /usr/share/games/fortunes)\n"
        "  --limit-train N, --limit-test N   use the first N samples (text: N windows)\n"
        "  --save FILE.safetensors checkpoint after every epoch (atomic; PyTorch-loadable names)\n"
        "  --save-every N          also a checkpoint every N steps; a {step} in the --save name\n"
        "                          is replaced by the step, so that each is kept\n"
        "  --init FILE             start from these parameters; --resume FILE continues a run\n"
        "  --metrics FILE.jsonl    one JSON object per step and per epoch\n"
        "  --trace FILE.json       Chrome trace of every device's work (Perfetto opens it)\n"
        "  --view                  show the run live in the viewer\n"
        "  --json                  end with one JSON line of results\n"
        "  --strategy single|replicated|layers|tensor|layers,tensor|replicated,tensor\n"
        "                          (several devices: replicated by default; the compositions:\n"
        "                          stages or replicas of --tensor-size T (2) devices each, the\n"
        "                          first T devices the first)\n"
        "  --balance equal|auto|3,1  (replicated)   --split auto|3,2  --micro-batches M\n"
        "  --schedule gpipe|1f1b (layers)          --mem-limit SIZE (per device, e.g. 512M)\n"
        "  --pipelines P           (layers) P pipelines of G/P stages each, the batch sharded\n"
        "                          over them, each stage's gradients summed across them\n"
        "  --shard-optimizer       (replicated) each device keeps the optimizer state of 1/n of\n"
        "                          the parameters (ZeRO-1): optimizer memory per device / n,\n"
        "                          parameters and gradients whole; the updated parameters are\n"
        "                          all-gathered every step. plan: prefer it where it fits\n"
        "  mpirun -np N vktrain train ...  one run over N processes (MPI): replicated or layers\n"
        "                          over every rank's devices in rank order; rank 0 reads the\n"
        "                          data, prints, writes --save, --metrics and --trace\n"
        "  --device-per-rank A,B   (mpirun) rank r's devices: entry r, devices joined by '+'\n"
        "  --rank-timeout S        (mpirun) a rank silent for S seconds (60) stops the run\n"
        "\n"
        "common options:\n"
        "  --device SPEC           comma-separated devices: an index, or part of the device or\n"
        "                          driver name (llvmpipe/lavapipe, swiftshader, nvidia, ...);\n"
        "                          the same device twice gives two logical devices.\n"
        "                          Default: the best device (discrete, integrated, then CPU)\n"
        "  --help, --version\n"
        "\n"
        "environment (a value a variable does not take is an error):\n"
        "  VKT_VALIDATION=1        run with the Khronos validation layer and synchronization\n"
        "                          validation; every message is printed\n"
        "  VKT_CACHE_DIR=DIR|off   where kernel measurements and pipeline caches are kept\n"
        "                          (default $XDG_CACHE_HOME/vktrain or ~/.cache/vktrain)\n"
        "  VKT_TUNE=off|force      never measure matmul variants, or measure them again\n"
        "  VKT_MATMUL_VARIANT=N[,N]  use these matmul variants instead of measuring\n"
        "  VKT_NET_FUSE=0|1        fuse activations and SGD into the matmuls: never, always\n"
        "                          (default: where the device gains from it)\n"
        "  VKT_CONV=columns        every convolution through columns and the matmul\n"
        "  VKT_AHEAD=off           compile no kernels ahead on a second thread\n"
        "  VKT_FONT=FILE.ttf       the viewer's font (default DejaVu Sans)\n",
        VKT_VERSION);
}

int cli_fail(const char *what) {
    fprintf(stderr, "vktrain: %s\n", what && *what ? what : "failed");
    return 1;
}

vkt_status cli_open_context(const vkt_world *world, vkt_context **ctx) {
    cli_env env;
    vkt_status st = cli_env_read(&env);
    if (st != VKT_OK) return st;
    // Ranks that share a machine compile no kernels ahead (engine/core/ahead.c): their queue
    // threads already keep its cores busy, and a cold 2-rank run on 2 cores started its steps
    // 2 s later with it (docs/PERFORMANCE.md).
    if (world && vkt_world_local_size(world) > 1) env.context.ahead = VKT_AHEAD_OFF;
    return vkt_context_create(&env.context, ctx);
}

// ---------------------------------------------------------------------------------------------
// vktrain devices

static int cmd_devices(int argc, char **argv) {
    bool json = false;
    const char *spec = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            spec = argv[++i];
        else {
            fprintf(stderr, "vktrain devices: unknown option %s (see vktrain --help)\n", argv[i]);
            return 2;
        }
    }
    vkt_context *ctx;
    if (cli_open_context(NULL, &ctx) != VKT_OK) return cli_fail(vkt_error());
    int best = vkt_context_best_device(ctx);
    // Without --device every device is listed; with it, what the SPEC selects, in its order.
    int sel[64], n = 0;
    if (spec) {
        if (vkt_context_select(ctx, spec, sel, 64, &n) != VKT_OK) {
            int rc = cli_fail(vkt_error());
            vkt_context_destroy(ctx);
            return rc;
        }
    } else {
        n = vkt_context_device_count(ctx);
        for (int i = 0; i < n && i < 64; i++)
            sel[i] = i;
    }
    if (json) {
        cJSON *arr = cJSON_CreateArray();
        for (int j = 0; j < n; j++) {
            int i = sel[j];
            const vkt_device_info *d = vkt_context_device_info(ctx, i);
            char api[32];
            vkt_api_version_string(d->api_version, api, sizeof api);
            cJSON *o = cJSON_CreateObject();
            if (spec) { // a run's devices: its position and name in the run, as train shows them
                char label[300];
                vkt_strategy_device_label(ctx, sel, n, j, label, sizeof label);
                cJSON_AddNumberToObject(o, "position", j);
                cJSON_AddStringToObject(o, "label", label);
            }
            cJSON_AddNumberToObject(o, "index", d->index);
            cJSON_AddStringToObject(o, "name", d->name);
            cJSON_AddNumberToObject(o, "vendor_id", d->vendor_id);
            cJSON_AddNumberToObject(o, "device_id", d->device_id);
            cJSON_AddStringToObject(o, "type", vkt_device_type_name(d->type));
            cJSON_AddStringToObject(o, "driver", d->driver);
            cJSON_AddStringToObject(o, "api_version", api);
            cJSON_AddNumberToObject(o, "memory_bytes", (double)d->memory_bytes);
            cJSON_AddNumberToObject(o, "subgroup_size", d->subgroup_size);
            cJSON_AddBoolToObject(o, "subgroup_shuffle", d->subgroup_shuffle);
            cJSON_AddNumberToObject(o, "max_workgroup_invocations", d->max_workgroup_invocations);
            cJSON_AddNumberToObject(o, "shared_memory_bytes", d->shared_memory_bytes);
            cJSON_AddNumberToObject(o, "timestamp_period_ns", d->timestamp_period_ns);
            cJSON_AddNumberToObject(o, "max_storage_buffer_range",
                                    (double)d->max_storage_buffer_range);
            cJSON_AddBoolToObject(o, "calibrated_timestamps", d->calibrated_timestamps);
            cJSON_AddBoolToObject(o, "external_memory_host", d->external_memory_host);
            cJSON_AddBoolToObject(o, "cooperative_matrix", d->cooperative_matrix);
            cJSON_AddBoolToObject(o, "best", i == best);
            cJSON_AddItemToArray(arr, o);
        }
        char *s = cJSON_PrintUnformatted(arr);
        printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(arr);
    } else {
        // "device" is the index --device takes; with --device, "#" is the position in the run
        // (docs/PARALLELISM.md, "Naming devices").
        if (spec) printf("%-3s ", "#");
        printf("%-6s %-34s %-8s %-10s %-9s %-8s %-8s %-6s %s\n", "device", "name", "type", "vendor",
               "api", "memory", "wg-max", "sg", "driver");
        for (int j = 0; j < n; j++) {
            int i = sel[j];
            const vkt_device_info *d = vkt_context_device_info(ctx, i);
            char api[32], vendor[16], mem[16];
            vkt_api_version_string(d->api_version, api, sizeof api);
            snprintf(vendor, sizeof vendor, "0x%04x", d->vendor_id);
            snprintf(mem, sizeof mem, "%.1fG", d->memory_bytes / 1073741824.0);
            if (spec) printf("#%-2d ", j);
            printf("%-6d %-34.34s %-8s %-10s %-9s %-8s %-8u %-6u %s%s\n", i, d->name,
                   vkt_device_type_name(d->type), vendor, api, mem, d->max_workgroup_invocations,
                   d->subgroup_size, d->driver, i == best ? "  [default]" : "");
        }
    }
    vkt_context_destroy(ctx);
    return 0;
}

// ---------------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    cli_env_install_hooks();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("vktrain %s\n", VKT_VERSION);
        return 0;
    }
    if (strcmp(cmd, "devices") == 0) return cmd_devices(argc - 2, argv + 2);
    if (strcmp(cmd, "view") == 0) return cmd_view(argc - 2, argv + 2);
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "plan") == 0) return cmd_plan(argc - 2, argv + 2);
    if (strcmp(cmd, "model") == 0) return cmd_model(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 2, argv + 2);
    if (strcmp(cmd, "advise") == 0) return cmd_advise(argc - 2, argv + 2);
    if (strcmp(cmd, "compare") == 0) return cmd_compare(argc - 2, argv + 2);
    fprintf(stderr, "vktrain: unknown command \"%s\" (vktrain --help lists the commands)\n", cmd);
    return 2;
}
