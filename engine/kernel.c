// kernel.c: compute pipelines from the SPIR-V embedded at build time. The storage-buffer bindings
// of set 0 are read from the SPIR-V itself, so a kernel's C side cannot disagree with its shader
// about how many buffers it takes. Push constants share one range of VKT_MAX_PUSH_BYTES.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkt_abi.h"
#include "vkt_internal.h"

const vkt_shader_blob *vkt_shader_find(const char *name) {
    for (const vkt_shader_blob *b = vkt_shader_blobs; b->name; b++)
        if (strcmp(b->name, name) == 0) return b;
    return NULL;
}

bool vkt_shader_exists(const char *name) { return vkt_shader_find(name) != NULL; }

// Number of bindings in descriptor set 0: one past the largest Binding decoration of a variable
// whose DescriptorSet is 0. Returns -1 for malformed SPIR-V.
static int count_bindings(const uint32_t *code, size_t words) {
    enum { OP_DECORATE = 71, DEC_BINDING = 33, DEC_SET = 34 };
    if (words < 5 || code[0] != 0x07230203u) return -1;
    uint32_t bound = code[3];
    int *binding = malloc(bound * sizeof *binding);
    int *set = malloc(bound * sizeof *set);
    if (!binding || !set) {
        free(binding);
        free(set);
        return -1;
    }
    for (uint32_t i = 0; i < bound; i++)
        binding[i] = -1, set[i] = -1;
    for (size_t i = 5; i < words;) {
        uint32_t len = code[i] >> 16, op = code[i] & 0xffffu;
        if (len == 0 || i + len > words) break;
        if (op == OP_DECORATE && len >= 4 && code[i + 1] < bound) {
            if (code[i + 2] == DEC_BINDING) binding[code[i + 1]] = (int)code[i + 3];
            if (code[i + 2] == DEC_SET) set[code[i + 1]] = (int)code[i + 3];
        }
        i += len;
    }
    int n = 0;
    for (uint32_t i = 0; i < bound; i++)
        if (set[i] == 0 && binding[i] >= n) n = binding[i] + 1;
    free(binding);
    free(set);
    return n;
}

vkt_status vkt_kernel_create(vkt_device *dev, const char *shader, const uint32_t *spec, int nspec,
                             vkt_kernel **out) {
    *out = NULL;
    const vkt_shader_blob *blob = vkt_shader_find(shader);
    if (!blob)
        return vkt_fail(VKT_ERR_ARG, "no shader named \"%s\" is built into this vktrain", shader);
    if (nspec > 32)
        return vkt_fail(VKT_ERR_ARG, "kernel %s: too many specialization constants", shader);
    // The workgroup size must fit the device: say so rather than let the driver fail.
    if (nspec >= 1) {
        uint64_t inv = spec[0];
        for (int i = 1; i < 3 && i < nspec; i++)
            inv *= spec[i];
        for (int i = 0; i < 3 && i < nspec; i++)
            if (spec[i] == 0 || spec[i] > dev->info->max_workgroup_size[i])
                return vkt_fail(VKT_ERR_ARG,
                                "kernel %s: workgroup size %u along %c is not "
                                "supported by %s (max %u)",
                                shader, spec[i], "xyz"[i], dev -> label,
                                dev -> info -> max_workgroup_size[i]);
        if (inv > dev->info->max_workgroup_invocations)
            return vkt_fail(VKT_ERR_ARG,
                            "kernel %s: workgroup of %llu invocations exceeds %s's "
                            "limit of %u",
                            shader, (unsigned long long)inv, dev->label,
                            dev->info->max_workgroup_invocations);
    }
    int nb = count_bindings(blob->code, blob->size / 4);
    if (nb < 0) return vkt_fail(VKT_ERR_FORMAT, "shader %s: malformed SPIR-V", shader);

    vkt_kernel *k = calloc(1, sizeof *k);
    if (!k) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    k->dev = dev;
    k->shader = blob->name;
    k->nbindings = nb;
    *out = k; // vkt_kernel_destroy cleans up partial state on failure below

    VkDescriptorSetLayoutBinding b[32];
    if (nb > 32) {
        vkt_kernel_destroy(k);
        *out = NULL;
        return vkt_fail(VKT_ERR_ARG, "shader %s: more than 32 bindings", shader);
    }
    for (int i = 0; i < nb; i++)
        b[i] = (VkDescriptorSetLayoutBinding){
            .binding = (uint32_t)i,
            .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .descriptorCount = 1,
            .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
        };
    VkDescriptorSetLayoutCreateInfo dl = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .bindingCount = (uint32_t)nb,
        .pBindings = b,
    };
    VkPushConstantRange range = {
        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
        .offset = 0,
        .size = VKT_MAX_PUSH_BYTES,
    };
    VkShaderModuleCreateInfo smi = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
        .codeSize = blob->size,
        .pCode = blob->code,
    };
    VkSpecializationMapEntry entries[32];
    for (int i = 0; i < nspec; i++)
        entries[i] = (VkSpecializationMapEntry){.constantID = (uint32_t)i,
                                                .offset = (uint32_t)(i * sizeof(uint32_t)),
                                                .size = sizeof(uint32_t)};
    VkSpecializationInfo si = {
        .mapEntryCount = (uint32_t)nspec,
        .pMapEntries = entries,
        .dataSize = (size_t)nspec * sizeof(uint32_t),
        .pData = spec,
    };
    VkShaderModule module = VK_NULL_HANDLE;
    vkt_status s = VKT_OK;
    VkResult r = dev->vk.vkCreateDescriptorSetLayout(dev->handle, &dl, NULL, &k->set_layout);
    if (r == VK_SUCCESS) {
        VkPipelineLayoutCreateInfo pl = {
            .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
            .setLayoutCount = 1,
            .pSetLayouts = &k->set_layout,
            .pushConstantRangeCount = 1,
            .pPushConstantRanges = &range,
        };
        r = dev->vk.vkCreatePipelineLayout(dev->handle, &pl, NULL, &k->layout);
    }
    if (r == VK_SUCCESS) r = dev->vk.vkCreateShaderModule(dev->handle, &smi, NULL, &module);
    if (r == VK_SUCCESS) {
        VkComputePipelineCreateInfo ci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage =
                {
                    .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                    .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                    .module = module,
                    .pName = "main",
                    .pSpecializationInfo = nspec ? &si : NULL,
                },
            .layout = k->layout,
        };
        r = dev->vk.vkCreateComputePipelines(dev->handle, dev->pipeline_cache, 1, &ci, NULL,
                                             &k->pipeline);
    }
    if (module) dev->vk.vkDestroyShaderModule(dev->handle, module, NULL);
    if (r != VK_SUCCESS) {
        char what[160];
        snprintf(what, sizeof what, "building kernel %s on %s", shader, dev->label);
        s = vkt_vk_fail(r, "vkCreateComputePipelines", what, __FILE__, __LINE__);
        vkt_kernel_destroy(k);
        *out = NULL;
    }
    return s;
}

void vkt_kernel_destroy(vkt_kernel *k) {
    if (!k) return;
    vkt_device *dev = k->dev;
    if (k->pipeline) dev->vk.vkDestroyPipeline(dev->handle, k->pipeline, NULL);
    if (k->layout) dev->vk.vkDestroyPipelineLayout(dev->handle, k->layout, NULL);
    if (k->set_layout) dev->vk.vkDestroyDescriptorSetLayout(dev->handle, k->set_layout, NULL);
    free(k);
}

int vkt_kernel_binding_count(const vkt_kernel *k) { return k->nbindings; }
