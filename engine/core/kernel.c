// kernel.c: compute pipelines from the SPIR-V embedded at build time. The bindings of set 0 and
// their descriptor types (storage buffer, or uniform texel buffer) are read from the SPIR-V
// itself, so a kernel's C side cannot disagree with its shader about what it binds. Push
// constants share one range of VKT_MAX_PUSH_BYTES.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"
#include "tune.h"
#include "vkt_abi.h"
#include "vkt_internal.h"
#include "vkt_shaders.h"

const vkt_shader_blob *vkt_shader_get(vkt_shader_id id) {
    return id < VKT_SHADER_COUNT ? &vkt_shader_blobs[id] : NULL;
}

const char *vkt_shader_name(vkt_shader_id id) {
    return id < VKT_SHADER_COUNT ? vkt_shader_blobs[id].name : NULL;
}

// The bindings of descriptor set 0 as descriptor types, from the SPIR-V: types[b] for binding b
// (bindings 0 .. n-1, n returned, -1 for malformed SPIR-V). A binding is a storage buffer (a
// Block in StorageBuffer or a BufferBlock in Uniform storage) or a uniform texel buffer (a
// sampled image of Dim Buffer: GLSL's samplerBuffer); anything else is reported in *bad (the
// binding) so that the caller can name it.
static int reflect_bindings(const uint32_t *code, size_t words, VkDescriptorType *types, int max,
                            int *bad) {
    enum {
        OP_TYPE_IMAGE = 25,
        OP_TYPE_SAMPLED_IMAGE = 27,
        OP_TYPE_POINTER = 32,
        OP_VARIABLE = 59,
        OP_DECORATE = 71,
        DEC_BUFFER_BLOCK = 3,
        DEC_BINDING = 33,
        DEC_SET = 34,
        SC_UNIFORM_CONSTANT = 0,
        SC_UNIFORM = 2,
        SC_STORAGE_BUFFER = 12,
        DIM_BUFFER = 5,
    };
    *bad = -1;
    if (words < 5 || code[0] != 0x07230203u || code[3] > (1u << 22)) return -1;
    uint32_t bound = code[3];
    // Per id: binding, set, decorations, and what a type or variable is made of.
    typedef struct {
        int binding, set;
        bool buffer_block;
        uint32_t op, a, b; // OpTypePointer: storage class, pointee; OpVariable: type, storage
                           // class; OpTypeSampledImage: image; OpTypeImage: dim, sampled
    } id_info;
    id_info *ids = calloc(bound, sizeof *ids);
    if (!ids) return -1;
    for (uint32_t i = 0; i < bound; i++)
        ids[i].binding = ids[i].set = -1;
    for (size_t i = 5; i < words;) {
        uint32_t len = code[i] >> 16, op = code[i] & 0xffffu;
        if (len == 0 || i + len > words) break;
        const uint32_t *w = code + i;
        if (op == OP_DECORATE && len >= 3 && w[1] < bound) {
            id_info *x = &ids[w[1]];
            if (w[2] == DEC_BINDING && len >= 4) x->binding = (int)w[3];
            if (w[2] == DEC_SET && len >= 4) x->set = (int)w[3];
            if (w[2] == DEC_BUFFER_BLOCK) x->buffer_block = true;
        } else if (op == OP_TYPE_POINTER && len >= 4 && w[1] < bound) {
            ids[w[1]].op = op, ids[w[1]].a = w[2], ids[w[1]].b = w[3];
        } else if (op == OP_VARIABLE && len >= 4 && w[2] < bound) {
            id_info *x = &ids[w[2]];
            x->op = op, x->a = w[1], x->b = w[3];
        } else if (op == OP_TYPE_SAMPLED_IMAGE && len >= 3 && w[1] < bound) {
            ids[w[1]].op = op, ids[w[1]].a = w[2];
        } else if (op == OP_TYPE_IMAGE && len >= 9 && w[1] < bound) {
            ids[w[1]].op = op, ids[w[1]].a = w[3], ids[w[1]].b = w[7];
        }
        i += len;
    }
    int n = 0;
    bool seen[32] = {false};
    for (uint32_t i = 0; i < bound; i++) {
        const id_info *v = &ids[i];
        if (v->op != OP_VARIABLE || v->set != 0 || v->binding < 0) continue;
        if (v->binding >= max) {
            *bad = v->binding;
            break;
        }
        // The variable's pointer type, and what it points to.
        const id_info *ptr = v->a < bound && ids[v->a].op == OP_TYPE_POINTER ? &ids[v->a] : NULL;
        const id_info *pt = ptr && ptr->b < bound ? &ids[ptr->b] : NULL;
        uint32_t sc = v->b;
        VkDescriptorType t = VK_DESCRIPTOR_TYPE_MAX_ENUM;
        if (pt && (sc == SC_STORAGE_BUFFER || (sc == SC_UNIFORM && pt->buffer_block)))
            t = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        else if (pt && sc == SC_UNIFORM_CONSTANT && pt->op == OP_TYPE_SAMPLED_IMAGE &&
                 pt->a < bound && ids[pt->a].op == OP_TYPE_IMAGE && ids[pt->a].a == DIM_BUFFER &&
                 ids[pt->a].b == 1)
            t = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
        if (t == VK_DESCRIPTOR_TYPE_MAX_ENUM) {
            *bad = v->binding;
            break;
        }
        // Aliases (one binding declared as vec4[] and as dvec4[]) must agree.
        if (seen[v->binding] && types[v->binding] != t) {
            *bad = v->binding;
            break;
        }
        seen[v->binding] = true;
        types[v->binding] = t;
        if (v->binding >= n) n = v->binding + 1;
    }
    // A binding that no variable uses (a gap some shaders leave, or one the compiler removed) is
    // still bound by the caller: a storage buffer, as every unused binding is.
    for (int b = 0; b < n; b++)
        if (!seen[b]) types[b] = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    free(ids);
    return n;
}

vkt_status vkt_kernel_create(vkt_device *dev, vkt_shader_id id, const uint32_t *spec, int nspec,
                             vkt_kernel **out) {
    *out = NULL;
    const vkt_shader_blob *blob = vkt_shader_get(id);
    if (!blob)
        return vkt_fail(VKT_ERR_ARG,
                        "no shader has id %u in this vktrain (it embeds %d: the "
                        "VKT_SHADER_* of vkt_shaders.h)",
                        id, VKT_SHADER_COUNT);
    const char *shader = blob->name;
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
    VkDescriptorType types[32];
    int bad;
    int nb = reflect_bindings(blob->code, blob->size / 4, types, 32, &bad);
    if (nb < 0) return vkt_fail(VKT_ERR_FORMAT, "shader %s: malformed SPIR-V", shader);
    if (bad >= 0)
        return vkt_fail(VKT_ERR_ARG,
                        "shader %s: binding %d of set 0 is beyond 32, or neither a storage "
                        "buffer nor a uniform texel buffer (all the engine binds)",
                        shader, bad);

    vkt_kernel *k = calloc(1, sizeof *k);
    if (!k) return vkt_fail(VKT_ERR_HOST_MEMORY, "out of host memory");
    k->dev = dev;
    k->shader = blob->name;
    k->nbindings = nb;
    k->id = id;
    k->nspec = nspec;
    if (nspec > 0) memcpy(k->spec, spec, (size_t)nspec * sizeof *spec);
    *out = k; // vkt_kernel_destroy cleans up partial state on failure below

    VkDescriptorSetLayoutBinding b[32];
    for (int i = 0; i < nb; i++) {
        k->types[i] = types[i];
        b[i] = (VkDescriptorSetLayoutBinding){
            .binding = (uint32_t)i,
            .descriptorType = types[i],
            .descriptorCount = 1,
            .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
        };
    }
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
    vkt_busy_begin(VKT_BUSY_BUILD);
    int64_t t0 = vkt_trace_now_ns();
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
    k->build_ns = vkt_trace_now_ns() - t0;
    vkt_busy_end(VKT_BUSY_BUILD, r == VK_SUCCESS);
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
