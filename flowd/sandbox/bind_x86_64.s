# landlock-bind <ruleset fd> <n> <uid_map> <gid_map> <mask 1> ... <mask n> <program path> <argv0> [args...]
# n > 0: unshare(CLONE_NEWUSER|CLONE_NEWNS); setgroups "deny"; uid_map, gid_map as given;
#   mount / private (recursively); each mask: "d<dir>" a read-only empty tmpfs over it, "f<file>"
#   /dev/null bound over it (a mask whose path is gone is skipped).
# prctl(PR_SET_NO_NEW_PRIVS, 1); landlock_restrict_self(fd, 0); close(fd);
# execve(program, argv from argv0, envp)
    .globl _start
    .text
_start:
    mov (%rsp), %r13            # argc
    lea 8(%rsp), %r15           # argv
    cmp $7, %r13
    jl fail
    mov 8(%r15), %rsi           # argv[1]: the fd, in decimal
    call atoi
    mov %eax, %r12d
    mov 16(%r15), %rsi          # argv[2]: how many masks
    call atoi
    mov %eax, %r14d
    lea 7(%r14), %rax
    cmp %rax, %r13
    jl fail
    test %r14, %r14
    jz bind
    mov $272, %eax              # unshare
    mov $0x10020000, %edi       # CLONE_NEWUSER | CLONE_NEWNS
    syscall
    test %rax, %rax
    jnz fail
    lea setgroups(%rip), %rdi
    lea deny(%rip), %rsi
    call wfile
    lea uidmap(%rip), %rdi
    mov 24(%r15), %rsi          # argv[3]
    call wfile
    lea gidmap(%rip), %rdi
    mov 32(%r15), %rsi          # argv[4]
    call wfile
    mov $165, %eax              # mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL)
    lea none(%rip), %rdi
    lea root(%rip), %rsi
    xor %edx, %edx
    mov $0x44000, %r10d
    xor %r8d, %r8d
    syscall
    test %rax, %rax
    jnz fail
    xor %ebx, %ebx
mask:
    cmp %r14, %rbx
    jge bind
    mov 40(%r15,%rbx,8), %rsi   # argv[5 + i]
    movzbl (%rsi), %eax
    inc %rsi
    cmp $100, %eax              # 'd'
    jne 3f
    lea none(%rip), %rdi        # mount("none", dir, "tmpfs", RDONLY|NOSUID|NODEV|NOEXEC, NULL)
    lea tmpfs(%rip), %rdx
    mov $15, %r10d
    jmp 4f
3:  lea devnull(%rip), %rdi     # mount("/dev/null", file, NULL, MS_BIND, NULL)
    xor %edx, %edx
    mov $4096, %r10d
4:  xor %r8d, %r8d
    mov $165, %eax
    syscall
    test %rax, %rax
    jz 5f
    cmp $-2, %rax               # ENOENT: gone since flowd looked
    jne fail
5:  inc %rbx
    jmp mask
bind:
    mov $157, %eax              # prctl
    mov $38, %edi               # PR_SET_NO_NEW_PRIVS
    mov $1, %esi
    xor %edx, %edx
    xor %r10d, %r10d
    xor %r8d, %r8d
    syscall
    test %rax, %rax
    jnz fail
    mov $446, %eax              # landlock_restrict_self
    mov %r12d, %edi
    xor %esi, %esi
    syscall
    test %rax, %rax
    jnz fail
    mov $3, %eax                # close
    mov %r12d, %edi
    syscall
    mov 40(%r15,%r14,8), %rdi   # argv[5 + n]: the program's path
    lea 48(%r15,%r14,8), %rsi   # argv[6 + n...]: its argv
    lea 8(%r15,%r13,8), %rdx    # envp
    mov $59, %eax               # execve
    syscall
    mov $127, %edi              # not found / not executable
    jmp out
fail:
    mov $2, %edi                # stderr
    lea msg(%rip), %rsi
    mov $msglen, %edx
    mov $1, %eax                # write
    syscall
    mov $126, %edi
out:
    mov $60, %eax               # exit
    syscall

atoi:                           # %rsi: decimal digits -> %eax
    xor %eax, %eax
1:  movzbl (%rsi), %ecx
    test %cl, %cl
    jz 2f
    sub $48, %ecx
    imul $10, %eax, %eax
    add %ecx, %eax
    inc %rsi
    jmp 1b
2:  ret

wfile:                          # write the string %rsi into the file %rdi; fail on error
    push %rsi
    mov $2, %eax                # open(path, O_WRONLY)
    mov $1, %esi
    xor %edx, %edx
    syscall
    pop %rsi
    test %rax, %rax
    js fail
    mov %rax, %rdi
    xor %edx, %edx
1:  cmpb $0, (%rsi,%rdx)
    je 2f
    inc %rdx
    jmp 1b
2:  mov $1, %eax                # write
    syscall
    test %rax, %rax
    js fail
    mov $3, %eax                # close
    syscall
    ret

msg: .ascii "flowd: landlock_restrict_self failed\n"
    .set msglen, . - msg
setgroups: .asciz "/proc/self/setgroups"
uidmap: .asciz "/proc/self/uid_map"
gidmap: .asciz "/proc/self/gid_map"
deny: .asciz "deny"
none: .asciz "none"
root: .asciz "/"
tmpfs: .asciz "tmpfs"
devnull: .asciz "/dev/null"
